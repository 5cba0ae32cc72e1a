// The objfs command line: URLs, every -o option, sizes, defaults, errors, help and version.

#include "fs/cli/mount_options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace objfs {
namespace {

MountEnvironment TestEnvironment() {
  MountEnvironment env;
  env.uid = 1234;
  env.gid = 5678;
  env.cache_root = "/home/u/.cache/objfs";
  env.home = "/home/u";
  return env;
}

Result<MountOptions> Parse(const std::vector<std::string>& args) {
  return ParseMountOptions(args, TestEnvironment());
}

// Parses "s3://bucket /mnt -o <options>" and expects success.
MountOptions ParseWith(const std::string& options) {
  Result<MountOptions> parsed = Parse({"s3://bucket", "/mnt", "-o", options});
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? *parsed : MountOptions{};
}

// Expects the options to be refused with a message containing `text`.
void ExpectError(const std::vector<std::string>& args, const std::string& text) {
  Result<MountOptions> parsed = Parse(args);
  ASSERT_FALSE(parsed.ok()) << "accepted: " << ::testing::PrintToString(args);
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find(text), std::string::npos)
      << "message: " << parsed.status().message();
  EXPECT_EQ(parsed.status().message().find('\n'), std::string::npos);
}

TEST(ParseMountUrlTest, S3BucketOnly) {
  Result<MountUrl> url = ParseMountUrl("s3://my-bucket");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->scheme, UrlScheme::kS3);
  EXPECT_EQ(url->bucket, "my-bucket");
  EXPECT_EQ(url->prefix, "");
  EXPECT_EQ(url->text, "s3://my-bucket");
}

TEST(ParseMountUrlTest, S3PrefixIsNormalizedToEndWithSlash) {
  for (const char* text : {"s3://b01/some/dir", "s3://b01/some/dir/", "s3://b01/some/dir//"}) {
    Result<MountUrl> url = ParseMountUrl(text);
    ASSERT_TRUE(url.ok()) << text << ": " << url.status().ToString();
    EXPECT_EQ(url->bucket, "b01");
    EXPECT_EQ(url->prefix, "some/dir/") << text;
  }
  Result<MountUrl> empty_prefix = ParseMountUrl("s3://b01/");
  ASSERT_TRUE(empty_prefix.ok());
  EXPECT_EQ(empty_prefix->prefix, "");
}

// "." and ".." would be keys named so on S3, and leave the directory the URL seems to name on
// SFTP.
TEST(ParseMountUrlTest, DotSegmentsAreRefused) {
  for (const char* text :
       {"s3://bucket/../etc", "s3://bucket/a/../x", "s3://bucket/./a", "s3://bucket/a/..",
        "s3://bucket/a/./", "sftp://h/srv/../etc", "sftp://h/..", "sftp://h/srv/.",
        "sftp://h/srv/./data/", "sftp://h/~/../root"}) {
    SCOPED_TRACE(text);
    Result<MountUrl> url = ParseMountUrl(text);
    ASSERT_FALSE(url.ok());
    EXPECT_EQ(url.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(url.status().message().find("path component"), std::string::npos)
        << url.status().message();
  }
  for (const char* text : {"sftp://h//srv", "sftp://h/srv//data"}) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(ParseMountUrl(text).ok());
  }
  // Dots inside names are names.
  for (const char* text :
       {"s3://bucket/a.b/..c/.d", "sftp://h/srv/.hidden/x..y/", "sftp://h/", "sftp://h/~/data"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(ParseMountUrl(text).ok()) << ParseMountUrl(text).status().ToString();
  }
}

TEST(ParseMountUrlTest, BadS3Urls) {
  EXPECT_FALSE(ParseMountUrl("s3://").ok());
  EXPECT_FALSE(ParseMountUrl("s3:///prefix").ok());
  EXPECT_FALSE(ParseMountUrl("s3://ab").ok());  // too short a bucket name
  EXPECT_FALSE(ParseMountUrl("s3://bad bucket").ok());
  EXPECT_FALSE(ParseMountUrl("s3://b01/a//b").ok());
  EXPECT_FALSE(ParseMountUrl("bucket").ok());
}

TEST(ParseMountUrlTest, SftpWithAllParts) {
  Result<MountUrl> url = ParseMountUrl("sftp://alice@files.example.com:2222/srv/data");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->scheme, UrlScheme::kSftp);
  EXPECT_EQ(url->user, "alice");
  EXPECT_EQ(url->host, "files.example.com");
  EXPECT_EQ(url->port, 2222);
  EXPECT_EQ(url->path, "/srv/data");
}

TEST(ParseMountUrlTest, SftpDefaultsAndIpv6) {
  Result<MountUrl> url = ParseMountUrl("sftp://host/");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->user, "");
  EXPECT_EQ(url->host, "host");
  EXPECT_EQ(url->port, 22);
  EXPECT_EQ(url->path, "/");

  Result<MountUrl> v6 = ParseMountUrl("sftp://bob@[::1]:2200/home/bob");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 2200);
  EXPECT_EQ(v6->user, "bob");
}

TEST(ParseMountUrlTest, BadSftpUrls) {
  EXPECT_FALSE(ParseMountUrl("sftp://host").ok());      // no path
  EXPECT_FALSE(ParseMountUrl("sftp:///path").ok());     // no host
  EXPECT_FALSE(ParseMountUrl("sftp://host:0/p").ok());  // bad port
  EXPECT_FALSE(ParseMountUrl("sftp://host:99999/p").ok());
  EXPECT_FALSE(ParseMountUrl("sftp://host:x/p").ok());
  EXPECT_FALSE(ParseMountUrl("sftp://@host/p").ok());  // empty user
}

TEST(ParseMountUrlTest, UnknownSchemeNamesIt) {
  Result<MountUrl> url = ParseMountUrl("gs://bucket");
  ASSERT_FALSE(url.ok());
  EXPECT_EQ(url.status().message(), "unsupported URL scheme 'gs' (use s3:// or sftp://)");
}

TEST(ParseSizeTest, SuffixesArePowersOf1024) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("4K"), 4096u);
  EXPECT_EQ(*ParseSize("4k"), 4096u);
  EXPECT_EQ(*ParseSize("1M"), 1u << 20);
  EXPECT_EQ(*ParseSize("1MiB"), 1u << 20);
  EXPECT_EQ(*ParseSize("64MB"), 64u << 20);
  EXPECT_EQ(*ParseSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseSize("1T"), 1ull << 40);
  EXPECT_EQ(*ParseSize("0"), 0u);
}

TEST(ParseSizeTest, BadSizes) {
  for (const char* text :
       {"", "K", "1X", "1.5M", "-1", "1MM", "1 M", "99999999999999999999", "17179869184G"}) {
    EXPECT_FALSE(ParseSize(text).ok()) << text;
  }
}

TEST(ParseMountOptionsTest, Defaults) {
  Result<MountOptions> parsed = Parse({"s3://bucket/dir", "/mnt"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const MountOptions& o = *parsed;
  EXPECT_EQ(o.action, MountAction::kMount);
  EXPECT_EQ(o.url.bucket, "bucket");
  EXPECT_EQ(o.url.prefix, "dir/");
  EXPECT_EQ(o.mountpoint, "/mnt");
  EXPECT_FALSE(o.foreground);
  EXPECT_FALSE(o.debug);
  EXPECT_EQ(o.fs.uid, 1234u);
  EXPECT_EQ(o.fs.gid, 5678u);
  EXPECT_EQ(o.fs.prefetch.read_buffer, 1u << 20);
  EXPECT_EQ(o.fs.prefetch.max_readahead, 64u << 20);
  EXPECT_FALSE(o.fs.read_only);
  EXPECT_DOUBLE_EQ(o.fs.metadata_delay, 1.0);
  EXPECT_DOUBLE_EQ(o.fs.writeback, 0);
  EXPECT_EQ(o.addressing, s3::Addressing::kAuto);
  EXPECT_EQ(o.endpoint, "");
  EXPECT_FALSE(o.multipart_threshold.has_value());
  EXPECT_FALSE(o.part_size.has_value());
  EXPECT_FALSE(o.copy_part_threshold.has_value());
  EXPECT_FALSE(o.parallel_parts.has_value());
  EXPECT_TRUE(o.fuse_options.empty());
  EXPECT_EQ(o.fs.cache_dir, "/home/u/.cache/objfs/" + MountCacheName(o.url));
}

TEST(ParseMountOptionsTest, CacheDirectoryIsPerUrlAndStable) {
  MountUrl a = *ParseMountUrl("s3://bucket/dir");
  MountUrl a_again = *ParseMountUrl("s3://bucket/dir/");
  MountUrl b = *ParseMountUrl("s3://bucket/other");
  MountUrl c = *ParseMountUrl("s3://bucket2/dir");
  EXPECT_EQ(MountCacheName(a), MountCacheName(a_again));
  EXPECT_NE(MountCacheName(a), MountCacheName(b));
  EXPECT_NE(MountCacheName(a), MountCacheName(c));
  EXPECT_EQ(MountCacheName(a).find('/'), std::string::npos);
  EXPECT_EQ(MountCacheName(a).rfind("s3-bucket-dir-", 0), 0u) << MountCacheName(a);
  MountUrl sftp = *ParseMountUrl("sftp://u@h:2222/x/y");
  EXPECT_EQ(MountCacheName(sftp).find('/'), std::string::npos);
  EXPECT_EQ(MountCacheName(sftp).rfind("sftp-", 0), 0u) << MountCacheName(sftp);
}

TEST(ParseMountOptionsTest, ForegroundAndDebug) {
  Result<MountOptions> f = Parse({"-f", "s3://bucket", "/mnt"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->foreground);
  EXPECT_FALSE(f->debug);
  Result<MountOptions> d = Parse({"s3://bucket", "/mnt", "-d"});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->debug);
  EXPECT_TRUE(d->foreground);  // -d implies -f
}

TEST(ParseMountOptionsTest, S3Options) {
  MountOptions o = ParseWith(
      "endpoint=http://127.0.0.1:8000,region=eu-west-1,profile=work,path_style,"
      "multipart_threshold=8M,part_size=5M,copy_part_threshold=1G,parallel_parts=7");
  EXPECT_EQ(o.endpoint, "http://127.0.0.1:8000");
  EXPECT_EQ(o.region, "eu-west-1");
  EXPECT_EQ(o.profile, "work");
  EXPECT_EQ(o.addressing, s3::Addressing::kPath);
  EXPECT_EQ(o.multipart_threshold, 8u << 20);
  EXPECT_EQ(o.part_size, 5u << 20);
  EXPECT_EQ(o.copy_part_threshold, 1ull << 30);
  EXPECT_EQ(o.parallel_parts, 7);
  EXPECT_EQ(ParseWith("virtual_host").addressing, s3::Addressing::kVirtualHost);
}

TEST(ParseMountOptionsTest, S3ObjectSettings) {
  MountOptions o = ParseWith(
      "storage_class=STANDARD_IA,acl=public-read,sse=aws:kms,sse_kms_key_id=alias/k,"
      "requester_pays");
  EXPECT_EQ(o.storage_class, "STANDARD_IA");
  EXPECT_EQ(o.acl, "public-read");
  EXPECT_EQ(o.sse, "aws:kms");
  EXPECT_EQ(o.sse_kms_key_id, "alias/k");
  EXPECT_TRUE(o.requester_pays);
  EXPECT_EQ(ParseWith("sse_c_key=~/sse.key").sse_c_key_file, "/home/u/sse.key");
  EXPECT_FALSE(ParseWith("").requester_pays);

  ExpectError({"s3://b", "/mnt", "-o", "acl=world"}, "acl");
  ExpectError({"s3://b", "/mnt", "-o", "sse=aes"}, "AES256");
  ExpectError({"s3://b", "/mnt", "-o", "storage_class=A B"}, "storage_class");
  ExpectError({"s3://bucket", "/mnt", "-o", "sse=AES256,sse_kms_key_id=k"}, "needs sse=aws:kms");
  ExpectError({"s3://bucket", "/mnt", "-o", "sse=AES256,sse_c_key=/k"}, "not both");
  ExpectError({"s3://bucket", "/mnt", "-o", "sse_c_key=/k,data_cache=/var/cache/objfs"},
              "plaintext on local disk");
  ExpectError({"s3://bucket", "/mnt", "-o", "data_cache=/var/cache/objfs,read_buffer=5000"},
              "multiple of 4K");
  ExpectError({"sftp://h/srv", "/mnt", "-o", "requester_pays"}, "applies to s3://");
}

TEST(ParseMountOptionsTest, LogsAndMountPoint) {
  MountOptions defaults = ParseWith("");
  EXPECT_EQ(defaults.log.sink, LogSink::kAuto);
  EXPECT_EQ(defaults.log.level, LogLevel::kInfo);
  EXPECT_EQ(defaults.log_metrics, 0);
  EXPECT_FALSE(defaults.nonempty);

  MountOptions o = ParseWith("log_level=debug,log=~/objfs.log,log_metrics=30,nonempty");
  EXPECT_EQ(o.log.sink, LogSink::kFile);
  EXPECT_EQ(o.log.path, "/home/u/objfs.log");
  EXPECT_EQ(o.log.level, LogLevel::kDebug);  // kept whatever the order
  EXPECT_EQ(o.log_metrics, 30);
  EXPECT_TRUE(o.nonempty);
  EXPECT_EQ(ParseWith("log=syslog").log.sink, LogSink::kSyslog);
  EXPECT_EQ(ParseWith("log=stderr,log_level=error").log.level, LogLevel::kError);
  // Both schemes.
  EXPECT_TRUE(Parse({"sftp://h/srv", "/mnt", "-o", "log=stderr,log_level=warn"}).ok());

  ExpectError({"s3://b", "/mnt", "-o", "log_level=verbose"}, "log_level");
  ExpectError({"s3://b", "/mnt", "-o", "log_metrics=0"}, "out of range");
  ExpectError({"s3://b", "/mnt", "-o", "log="}, "needs a value");
}

TEST(ParseMountOptionsTest, FilesystemOptions) {
  MountOptions o = ParseWith(
      "cache_dir=/var/cache/x,read_buffer=64K,max_readahead=8M,uid=1000,gid=100,umask=027,"
      "attr_timeout=2.5,negative_timeout=0,io_threads=3,prefetch_memory=32M,"
      "max_rename_objects=50,readdir_heads=0,direct_io,metadata_delay=0");
  EXPECT_EQ(o.fs.cache_dir, "/var/cache/x");
  EXPECT_EQ(o.fs.prefetch.read_buffer, 64u << 10);
  EXPECT_EQ(o.fs.prefetch.max_readahead, 8u << 20);
  EXPECT_EQ(o.fs.uid, 1000u);
  EXPECT_EQ(o.fs.gid, 100u);
  EXPECT_EQ(o.fs.umask, 027u);
  EXPECT_DOUBLE_EQ(o.fs.attr_timeout, 2.5);
  EXPECT_DOUBLE_EQ(o.fs.entry_timeout, 2.5);
  EXPECT_DOUBLE_EQ(o.fs.negative_timeout, 0);
  EXPECT_EQ(o.fs.io_threads, 3);
  EXPECT_EQ(o.fs.prefetch_memory, 32u << 20);
  EXPECT_EQ(o.fs.max_rename_objects, 50u);
  EXPECT_EQ(o.fs.readdir_heads, 0u);
  EXPECT_FALSE(o.fs.listing_attrs);
  EXPECT_TRUE(ParseWith("listing_attrs").fs.listing_attrs);
  EXPECT_TRUE(o.direct_io);
  EXPECT_FALSE(ParseWith("ro").direct_io);
  EXPECT_DOUBLE_EQ(o.fs.metadata_delay, 0);
  EXPECT_DOUBLE_EQ(ParseWith("metadata_delay=2.5").fs.metadata_delay, 2.5);
}

TEST(ParseMountOptionsTest, MaxMetadataIsS3OnlyWithAwsDefault) {
  EXPECT_EQ(ParseWith("uid=1").fs.max_metadata, 2048u);
  EXPECT_EQ(ParseWith("max_metadata=16K").fs.max_metadata, 16u << 10);
  EXPECT_EQ(ParseWith("max_metadata=256").fs.max_metadata, 256u);
  ExpectError({"s3://bucket", "/mnt", "-o", "max_metadata=255"}, "too small");
  ExpectError({"s3://bucket", "/mnt", "-o", "max_metadata=2M"}, "too large");
  ExpectError({"s3://bucket", "/mnt", "-o", "max_metadata=lots"}, "bad size 'lots'");
  ExpectError({"s3://bucket", "/mnt", "-o", "max_metadata="}, "needs a value");
  ExpectError({"sftp://h/srv", "/mnt", "-o", "max_metadata=4K"},
              "option 'max_metadata' applies to s3:// URLs, not to sftp://");
  Result<MountOptions> sftp = Parse({"sftp://h/srv", "/mnt"});
  ASSERT_TRUE(sftp.ok()) << sftp.status().ToString();
  EXPECT_EQ(sftp->fs.max_metadata, 0u);  // SFTP sets attributes in place: no such limit
}

TEST(ParseMountOptionsTest, TimeoutsForBothSchemes) {
  MountOptions defaults = ParseWith("");
  EXPECT_DOUBLE_EQ(defaults.request_timeout, 30);
  EXPECT_DOUBLE_EQ(defaults.operation_timeout, 120);
  MountOptions s3 = ParseWith("request_timeout=2,operation_timeout=5.5");
  EXPECT_DOUBLE_EQ(s3.request_timeout, 2);
  EXPECT_DOUBLE_EQ(s3.operation_timeout, 5.5);
  Result<MountOptions> sftp =
      Parse({"sftp://host/srv", "/mnt", "-o", "request_timeout=3,operation_timeout=9"});
  ASSERT_TRUE(sftp.ok()) << sftp.status().ToString();
  EXPECT_DOUBLE_EQ(sftp->request_timeout, 3);
  EXPECT_DOUBLE_EQ(sftp->operation_timeout, 9);
  ExpectError({"s3://bucket", "/mnt", "-o", "request_timeout=0"}, "out of range");
  ExpectError({"s3://bucket", "/mnt", "-o", "operation_timeout=soon"},
              "bad value 'soon' for operation_timeout");
  ExpectError({"sftp://host/srv", "/mnt", "-o", "operation_timeout"}, "needs a value");
}

TEST(ParseMountOptionsTest, RepeatedAndAttachedDashO) {
  Result<MountOptions> parsed =
      Parse({"-ouid=7", "s3://bucket", "-o", "gid=8", "/mnt", "-o", "umask=0,uid=9"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->fs.uid, 9u);  // the last one wins
  EXPECT_EQ(parsed->fs.gid, 8u);
  EXPECT_EQ(parsed->fs.umask, 0u);
}

TEST(ParseMountOptionsTest, ReadBufferDownTo4K) {
  EXPECT_EQ(ParseWith("read_buffer=4K").fs.prefetch.read_buffer, 4096u);
  EXPECT_EQ(ParseWith("read_buffer=4096").fs.prefetch.read_buffer, 4096u);
  ExpectError({"s3://bucket", "/mnt", "-o", "read_buffer=4095"}, "too small");
  ExpectError({"s3://bucket", "/mnt", "-o", "read_buffer=2M,max_readahead=1M"}, "max_readahead");
}

TEST(ParseMountOptionsTest, DataCacheIsOffUnlessGivenAndBoundedByItsSize) {
  MountOptions plain = ParseWith("read_buffer=64K");
  EXPECT_EQ(plain.data_cache, "");
  MountOptions o = ParseWith("data_cache=~/data,data_cache_size=256M");
  EXPECT_EQ(o.data_cache, "/home/u/data");
  EXPECT_EQ(o.data_cache_size, 256u << 20);
  EXPECT_EQ(ParseWith("data_cache=/d").data_cache_size, kDefaultDataCacheSize);
  ExpectError({"s3://bucket", "/mnt", "-o", "data_cache_size=1G"}, "needs data_cache=DIR");
  ExpectError({"s3://bucket", "/mnt", "-o", "data_cache=/d,data_cache_size=64K,read_buffer=1M"},
              "must not be smaller than read_buffer");
  ExpectError({"s3://bucket", "/mnt", "-o", "data_cache=/d,data_cache_size=1Q"}, "bad size");
}

TEST(ParseMountOptionsTest, FuseOptionsArePassedThrough) {
  MountOptions o = ParseWith("ro,allow_other,default_permissions,fsname=mine");
  EXPECT_TRUE(o.fs.read_only);
  EXPECT_EQ(o.fuse_options,
            (std::vector<std::string>{"ro", "allow_other", "default_permissions", "fsname=mine"}));
  EXPECT_TRUE(o.has_fsname);
  EXPECT_FALSE(ParseWith("allow_other").has_fsname);
}

// Without default_permissions the kernel checks nothing for FUSE, and objfs neither: with
// allow_other any local user could read and change every file.
TEST(ParseMountOptionsTest, AllowOtherImpliesDefaultPermissions) {
  MountOptions o = ParseWith("allow_other");
  EXPECT_EQ(o.fuse_options, (std::vector<std::string>{"allow_other", "default_permissions"}));
  EXPECT_FALSE(o.unchecked_other_users);
  // Said explicitly, it is not added twice.
  EXPECT_EQ(ParseWith("default_permissions,allow_other").fuse_options,
            (std::vector<std::string>{"default_permissions", "allow_other"}));
  // Only no_default_permissions gives the unchecked mount, with a warning at mount time.
  MountOptions unchecked = ParseWith("allow_other,no_default_permissions");
  EXPECT_EQ(unchecked.fuse_options, (std::vector<std::string>{"allow_other"}));
  EXPECT_TRUE(unchecked.unchecked_other_users);
  EXPECT_TRUE(ParseWith("no_default_permissions").fuse_options.empty());
  EXPECT_FALSE(ParseWith("no_default_permissions").unchecked_other_users);
  ExpectError({"s3://bucket", "/mnt", "-o", "default_permissions,no_default_permissions"},
              "contradict");
}

// S3 refuses parts under 5 MiB (but the last) and above 5 GiB, and single PUTs and copies
// above 5 GiB: such settings fail at mount, not at every upload.
TEST(ParseMountOptionsTest, S3SizesOutsideS3sLimitsAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"part_size=1", "part_size=1 is out of range (5M..5120M)"},
      {"part_size=0", "part_size=0 is out of range (5M..5120M)"},
      {"copy_part_threshold=0", "copy_part_threshold=0 is out of range (1..5120M)"},
      {"part_size=4M", "out of range"},
      {"part_size=6G", "out of range"},
      {"multipart_threshold=1M", "multipart_threshold=1M is out of range"},
      {"multipart_threshold=6G", "out of range"},
      {"copy_part_threshold=6G", "out of range"},
  };
  for (const auto& [option, text] : cases) {
    SCOPED_TRACE(option);
    ExpectError({"s3://bucket", "/mnt", "-o", option}, text);
  }
  MountOptions edges = ParseWith("part_size=5M,multipart_threshold=5G,copy_part_threshold=5G");
  EXPECT_EQ(edges.part_size, 5u << 20);
  EXPECT_EQ(edges.multipart_threshold, 5ull << 30);
  EXPECT_EQ(ParseWith("part_size=5G").part_size, 5ull << 30);
}

TEST(ParseMountOptionsTest, GenericMountOptionsAreAccepted) {
  MountOptions o =
      ParseWith("rw,dev,nodev,suid,nosuid,exec,noexec,auto,noauto,user,nouser,_netdev");
  EXPECT_FALSE(o.fs.read_only);
  // Kernel flags go to the mount; mount(8)'s own options do not.
  EXPECT_EQ(o.fuse_options,
            (std::vector<std::string>{"rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec"}));
  EXPECT_FALSE(ParseWith("ro,rw").fs.read_only);
  // libfuse 3.14 refuses relatime and the other access-time flags: they are dropped.
  EXPECT_EQ(ParseWith("noatime,relatime,lazytime,dirsync,auto_unmount,nofail").fuse_options,
            (std::vector<std::string>{"noatime", "dirsync", "auto_unmount"}));
  ExpectError({"s3://bucket", "/mnt", "-o", "sync"}, "option 'sync' is not supported");
  ExpectError({"s3://bucket", "/mnt", "-o", "noatime=1"}, "option 'noatime' takes no value");
}

TEST(ParseMountOptionsTest, BadOptionValues) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"no_such_option", "unknown option 'no_such_option'"},
      {"read_buffer=lots", "bad size 'lots' for read_buffer"},
      {"read_buffer", "needs a value"},
      {"endpoint=", "needs a value"},
      {"max_readahead=1Q", "bad size"},
      {"uid=-1", "uid"},
      {"uid=abc", "uid"},
      {"gid=4294967296", "out of range"},
      {"umask=999", "octal"},
      {"umask=1777", "out of range"},
      {"attr_timeout=-1", "attr_timeout"},
      {"attr_timeout=soon", "attr_timeout"},
      {"negative_timeout=x", "negative_timeout"},
      {"metadata_delay=-1", "metadata_delay"},
      {"parallel_parts=0", "out of range"},
      {"io_threads=0", "out of range"},
      {"readdir_heads=2000000", "out of range"},
      {"io_threads=many", "io_threads"},
      {"part_size=0", "out of range"},
      {"prefetch_memory=1K", "too small"},
      {"max_rename_objects=0", "out of range"},
      {"path_style=yes", "takes no value"},
      {"ro=1", "takes no value"},
      {"direct_io=yes", "takes no value"},
  };
  for (const auto& [option, text] : cases) {
    SCOPED_TRACE(option);
    ExpectError({"s3://bucket", "/mnt", "-o", option}, text);
  }
}

TEST(ParseMountOptionsTest, BadArguments) {
  ExpectError({}, "missing URL");
  ExpectError({"s3://bucket"}, "missing mount point");
  ExpectError({"s3://bucket", "/mnt", "extra"}, "unexpected argument 'extra'");
  ExpectError({"s3://bucket", "/mnt", "-x"}, "unknown argument '-x'");
  ExpectError({"s3://bucket", "/mnt", "-o"}, "-o needs");
  ExpectError({"ftp://host/x", "/mnt"}, "unsupported URL scheme 'ftp'");
  ExpectError({"s3://", "/mnt"}, "no bucket");
}

TEST(ParseMountOptionsTest, SftpUrlIsParsed) {
  Result<MountOptions> parsed = Parse({"sftp://me@host:2022/data", "/mnt"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->url.scheme, UrlScheme::kSftp);
  EXPECT_EQ(parsed->url.host, "host");
  EXPECT_EQ(parsed->url.port, 2022);
}

TEST(ParseMountOptionsTest, SftpDefaults) {
  Result<MountOptions> parsed = Parse({"sftp://host/srv", "/mnt"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->identity_files.empty());  // ssh-agent, then ~/.ssh/id_*
  EXPECT_EQ(parsed->known_hosts, "/home/u/.ssh/known_hosts");
  EXPECT_FALSE(parsed->accept_new_host_key);
  EXPECT_FALSE(parsed->sessions.has_value());
  EXPECT_EQ(parsed->fs.cache_dir, "/home/u/.cache/objfs/" + MountCacheName(parsed->url));

  MountEnvironment homeless = TestEnvironment();
  homeless.home.clear();
  Result<MountOptions> no_home = ParseMountOptions({"sftp://host/srv", "/mnt"}, homeless);
  ASSERT_TRUE(no_home.ok()) << no_home.status().ToString();
  EXPECT_EQ(no_home->known_hosts, "");  // libssh's default
}

TEST(ParseMountOptionsTest, SftpOptions) {
  Result<MountOptions> parsed =
      Parse({"sftp://me@host:2022/data", "/mnt", "-o",
             "identity=/keys/a,identity=~/.ssh/b,known_hosts=~/kh,accept_new_host_key", "-o",
             "sessions=64,identity=rel/c"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->identity_files,
            (std::vector<std::string>{"/keys/a", "/home/u/.ssh/b", "rel/c"}));  // in order
  EXPECT_EQ(parsed->known_hosts, "/home/u/kh");
  EXPECT_TRUE(parsed->accept_new_host_key);
  EXPECT_FALSE(parsed->no_server_md5);
  EXPECT_TRUE(Parse({"sftp://h/p", "/mnt", "-o", "no_server_md5"})->no_server_md5);
  EXPECT_FALSE(parsed->no_server_cp);
  EXPECT_TRUE(Parse({"sftp://h/p", "/mnt", "-o", "no_server_cp"})->no_server_cp);
  EXPECT_EQ(parsed->sessions, 64);
  EXPECT_EQ(Parse({"sftp://h/p", "/mnt", "-o", "sessions=1"})->sessions, 1);
  EXPECT_EQ(parsed->ciphers, "");  // objfs's default order
  EXPECT_EQ(Parse({"sftp://h/p", "/mnt", "-o", "ciphers=aes256-ctr:chacha20-poly1305@openssh.com"})
                ->ciphers,
            "aes256-ctr,chacha20-poly1305@openssh.com");
  // The last known_hosts wins.
  EXPECT_EQ(Parse({"sftp://h/p", "/mnt", "-o", "known_hosts=/a,known_hosts=/b"})->known_hosts,
            "/b");
}

TEST(ParseMountOptionsTest, BadSftpOptionValues) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sessions=0", "sessions=0 is out of range (1..64)"},
      {"sessions=65", "sessions=65 is out of range (1..64)"},
      {"sessions=many", "bad value 'many' for sessions"},
      {"sessions", "needs a value"},
      {"identity", "option 'identity' needs a value"},
      {"identity=", "option 'identity' needs a value"},
      {"known_hosts=", "option 'known_hosts' needs a value"},
      {"ciphers=", "option 'ciphers' needs a value"},
      {"accept_new_host_key=yes", "option 'accept_new_host_key' takes no value"},
  };
  for (const auto& [option, text] : cases) {
    SCOPED_TRACE(option);
    ExpectError({"sftp://host/p", "/mnt", "-o", option}, text);
  }
  MountEnvironment homeless = TestEnvironment();
  homeless.home.clear();
  Result<MountOptions> tilde =
      ParseMountOptions({"sftp://host/p", "/mnt", "-o", "identity=~/.ssh/k"}, homeless);
  ASSERT_FALSE(tilde.ok());
  EXPECT_EQ(tilde.status().message(), "cannot expand '~' in identity=~/.ssh/k: no home directory");
}

TEST(ParseMountOptionsTest, OptionsOfTheOtherSchemeAreRefused) {
  for (const char* option :
       {"endpoint=http://127.0.0.1:8000", "region=r", "profile=p", "path_style", "virtual_host",
        "multipart_threshold=8M", "part_size=5M", "copy_part_threshold=1G", "parallel_parts=2"}) {
    SCOPED_TRACE(option);
    std::string name = std::string(option).substr(0, std::string(option).find('='));
    ExpectError({"sftp://host/p", "/mnt", "-o", option},
                "option '" + name + "' applies to s3:// URLs, not to sftp://");
    // Also when the option comes before the URL.
    ExpectError({"-o", option, "sftp://host/p", "/mnt"}, "applies to s3:// URLs");
  }
  for (const char* option : {"identity=/k", "known_hosts=/kh", "accept_new_host_key", "sessions=2",
                             "ciphers=aes128-ctr", "no_server_md5", "no_server_cp"}) {
    SCOPED_TRACE(option);
    std::string name = std::string(option).substr(0, std::string(option).find('='));
    ExpectError({"s3://bucket", "/mnt", "-o", option},
                "option '" + name + "' applies to sftp:// URLs, not to s3://");
  }
  // Options of both kinds are fine with either scheme.
  EXPECT_TRUE(Parse({"sftp://host/p", "/mnt", "-o", "read_buffer=64K,ro,uid=1"}).ok());
}

TEST(ParseMountOptionsTest, HelpAndVersionWinOverEverythingElse) {
  for (const char* flag : {"-h", "--help"}) {
    Result<MountOptions> parsed = Parse({"s3://bucket", flag, "-o", "bogus"});
    ASSERT_TRUE(parsed.ok()) << flag;
    EXPECT_EQ(parsed->action, MountAction::kHelp);
  }
  for (const char* flag : {"-V", "--version"}) {
    Result<MountOptions> parsed = Parse({flag});
    ASSERT_TRUE(parsed.ok()) << flag;
    EXPECT_EQ(parsed->action, MountAction::kVersion);
  }
  std::string usage = MountUsage();
  for (const char* option :
       {"endpoint=", "read_buffer=", "max_rename_objects=", "allow_other", "cache_dir=",
        "multipart_threshold=", "identity=", "known_hosts=", "accept_new_host_key", "sessions="}) {
    EXPECT_NE(usage.find(option), std::string::npos) << option;
  }
}

// Each option is declared once, and --help shows every declared name with its value.
TEST(OptionSpecsTest, EveryOptionIsDeclaredOnceAndListedByHelp) {
  std::set<std::string_view> names;
  const std::string usage = MountUsage();
  for (const OptionSpec& spec : MountOptionSpecs()) {
    EXPECT_FALSE(spec.meaning.empty()) << spec.names[0];
    for (std::string_view name : spec.names) {
      EXPECT_TRUE(names.insert(name).second) << "declared twice: " << name;
      std::string shown(name);
      if (spec.value == OptionSpec::Value::kRequired) shown.append("=").append(spec.value_name);
      // Alone on its line ("  name=VALUE   meaning") or among others ("  a, name, b").
      EXPECT_TRUE(usage.find(" " + shown + " ") != std::string::npos ||
                  usage.find(" " + shown + "\n") != std::string::npos ||
                  usage.find(" " + shown + ",") != std::string::npos)
          << shown << " missing from:\n"
          << usage;
    }
  }
  EXPECT_GE(names.size(), 60u);
  // --help fits a terminal of 80 columns.
  std::istringstream lines(usage);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
}

// README.md's options table is OptionsMarkdown(): `objfs --help-markdown` regenerates it.
TEST(OptionSpecsTest, ReadmeTableIsTheGeneratedOne) {
  const char* source = std::getenv("OBJFS_SOURCE_DIR");
  const std::filesystem::path readme =
      std::filesystem::path(source != nullptr && *source != '\0' ? source : OBJFS_SOURCE_DIR) /
      "README.md";
  std::ifstream in(readme);
  ASSERT_TRUE(in) << "cannot read " << readme;
  const std::string begin = "<!-- options table: generated by objfs --help-markdown -->";
  const std::string end = "<!-- end of the generated options table -->";
  std::string table;
  bool inside = false;
  bool ended = false;
  for (std::string line; std::getline(in, line);) {
    if (line == begin) {
      inside = true;
    } else if (line == end) {
      ended = inside;
      inside = false;
    } else if (inside) {
      table += line + "\n";
    }
  }
  ASSERT_TRUE(ended) << readme << " lacks the lines '" << begin << "' and '" << end << "'";
  EXPECT_EQ(table, OptionsMarkdown())
      << "README.md's options table differs from the declarations in cli/mount_options.cc: "
         "replace it with the output of `objfs --help-markdown`";
}

TEST(OptionSpecsTest, HelpMarkdownIsAnAction) {
  Result<MountOptions> parsed = Parse({"--help-markdown"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->action, MountAction::kHelpMarkdown);
  const std::string table = OptionsMarkdown();
  EXPECT_EQ(table.rfind("| option | URLs | meaning | default |\n|---|---|---|---|\n", 0), 0u);
  EXPECT_NE(table.find("| `part_size=SIZE` | `s3://` |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `sessions=N` | `sftp://` |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `read_buffer=SIZE` | all |"), std::string::npos) << table;
}

// The man pages' OPTIONS section (packaging/man.cmake puts `objfs --help-man` into them): every
// declared option, each an indented paragraph, and nothing troff would take for a request.
TEST(OptionSpecsTest, HelpManListsEveryOption) {
  Result<MountOptions> parsed = Parse({"--help-man"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->action, MountAction::kHelpMan);
  const std::string man = OptionsMan();
  EXPECT_EQ(man.rfind(".SS S3 options\n", 0), 0u) << man;
  EXPECT_NE(man.find(".TP\n\\fBpart_size\\fR=\\fISIZE\\fR\n"), std::string::npos) << man;
  EXPECT_NE(man.find(" (\\fBsftp://\\fR URLs)\n"), std::string::npos) << man;
  EXPECT_NE(man.find("\n.br\nDefault: 16M.\n"), std::string::npos) << man;
  for (const OptionSpec& spec : MountOptionSpecs()) {
    for (std::string_view name : spec.names) {
      std::string troff_name;
      for (char c : name) troff_name += c == '-' ? std::string("\\-") : std::string(1, c);
      EXPECT_NE(man.find("\\fB" + troff_name + "\\fR"), std::string::npos)
          << "option '" << name << "' is missing from the man pages";
    }
  }
  std::istringstream lines(man);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || (line[0] != '.' && line[0] != '\'')) continue;
    EXPECT_TRUE(line.rfind(".SS ", 0) == 0 || line == ".TP" || line == ".br") << line;
  }
}

// A scheme added by a build of the command line: its URLs, its own options (refused with other
// schemes), and the options of s3:// and sftp:// refused with it.
TEST(OptionSpecsTest, AddedSchemeAndItsOptions) {
  SchemeSyntax memory{.name = "memory", .usage = "memory://NAME", .description = "in memory"};
  memory.options.push_back({.names = {"flavour"},
                            .value = OptionSpec::Value::kRequired,
                            .value_name = "A|B",
                            .schemes = {"memory"},
                            .group = OptionSpec::Group::kScheme,
                            .meaning = "which one",
                            .choices = {"a", "b"}});
  memory.options.push_back({.names = {"loud"},
                            .schemes = {"memory"},
                            .group = OptionSpec::Group::kScheme,
                            .meaning = "a flag"});
  const std::vector<SchemeSyntax> extra = {memory};
  auto parse = [&](const std::vector<std::string>& args) {
    return ParseMountOptions(args, TestEnvironment(), extra);
  };

  Result<MountOptions> parsed = parse({"memory://pool/x", "/mnt", "-o", "flavour=b,loud,uid=3"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->url.scheme, UrlScheme::kOther);
  EXPECT_EQ(parsed->url.scheme_name, "memory");
  EXPECT_EQ(parsed->url.rest, "pool/x");
  EXPECT_EQ(parsed->scheme_options,
            (std::map<std::string, std::string>{{"flavour", "b"}, {"loud", ""}}));
  EXPECT_EQ(parsed->fs.uid, 3u);
  EXPECT_EQ(parsed->fs.cache_dir.rfind("/home/u/.cache/objfs/memory-pool-x-", 0), 0u)
      << parsed->fs.cache_dir;

  auto expect_error = [&](const std::vector<std::string>& args, const std::string& message) {
    Result<MountOptions> r = parse(args);
    ASSERT_FALSE(r.ok()) << ::testing::PrintToString(args);
    EXPECT_EQ(r.status().message(), message);
  };
  expect_error({"memory://x", "/mnt", "-o", "flavour=c"},
               "bad value 'c' for flavour (expected a or b)");
  expect_error({"memory://x", "/mnt", "-o", "loud=1"}, "option 'loud' takes no value");
  expect_error({"-o", "part_size=8M", "memory://x", "/mnt"},
               "option 'part_size' applies to s3:// URLs, not to memory://");
  expect_error({"memory://x", "/mnt", "-o", "sessions=2"},
               "option 'sessions' applies to sftp:// URLs, not to memory://");
  expect_error({"s3://bucket", "/mnt", "-o", "flavour=a"},
               "option 'flavour' applies to memory:// URLs, not to s3://");
  expect_error({"memory://", "/mnt"}, "URL 'memory://' names nothing");
  expect_error({"gs://x", "/mnt"}, "unsupported URL scheme 'gs' (use s3://, sftp:// or memory://)");
  // Without the scheme, neither its URLs nor its options exist.
  ExpectError({"memory://x", "/mnt"}, "unsupported URL scheme 'memory' (use s3:// or sftp://)");
  ExpectError({"s3://bucket", "/mnt", "-o", "loud"}, "unknown option 'loud'");

  const std::string usage = MountUsage(extra);
  EXPECT_NE(usage.find("memory://NAME"), std::string::npos) << usage;
  EXPECT_NE(usage.find("memory:// options:"), std::string::npos) << usage;
  EXPECT_NE(usage.find("  flavour=A|B"), std::string::npos) << usage;
  EXPECT_EQ(MountUsage().find("flavour"), std::string::npos);
}

TEST(ParseMountOptionsTest, DoubleDashEndsOptions) {
  Result<MountOptions> parsed = Parse({"--", "s3://bucket", "-odd-mount-point"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->mountpoint, "-odd-mount-point");
}

}  // namespace
}  // namespace objfs
