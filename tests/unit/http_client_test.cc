// The S3 client's HTTP transport against a loopback peer that can misbehave on purpose: refuse,
// reset, go silent, or answer in ways a real server rarely does (interim 100 responses).
#include "backend/s3/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs::s3 {
namespace {

// A request as the loopback server parsed it.
struct ReceivedRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // names lowercased, values trimmed
  std::string body;
  int connection = 0;  // which accepted connection carried it, from 1
};

std::string Trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// A single-threaded HTTP/1.1 peer on 127.0.0.1 with an ephemeral port. One thread polls the
// listening socket, every open connection and an eventfd that the destructor signals to stop.
class LoopbackServer {
 public:
  enum class Behavior {
    kRespond,           // answer every request with the handler's bytes, keep the connection
    kRespondThenClose,  // answer, then close the connection without saying so
    kResetOnAccept,     // close each connection with a RST as soon as it is accepted
    kNeverAnswer,       // accept, read, and never send a byte
  };
  // Returns the raw bytes of the response (status line, headers, body).
  using Handler = std::function<std::string(const ReceivedRequest&)>;

  explicit LoopbackServer(Handler handler, Behavior behavior = Behavior::kRespond)
      : handler_(std::move(handler)), behavior_(behavior) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(listen_fd_, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listen_fd_, 64), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    EXPECT_GE(stop_fd_, 0);
    thread_ = std::thread([this] { Run(); });
  }

  ~LoopbackServer() {
    uint64_t one = 1;
    EXPECT_EQ(::write(stop_fd_, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
    thread_.join();
    ::close(stop_fd_);
    ::close(listen_fd_);
  }

  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  uint16_t port() const { return port_; }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string host_port() const { return "127.0.0.1:" + std::to_string(port_); }
  int accepts() const { return accepts_.load(); }
  std::vector<ReceivedRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  struct Connection {
    int fd;
    int id;
    std::string in;
  };

  void Run() {
    std::vector<Connection> connections;
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({stop_fd_, POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const Connection& c : connections) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        ADD_FAILURE() << "poll: " << std::strerror(errno);
        break;
      }
      if (fds[0].revents != 0) break;
      if (fds[1].revents & POLLIN) Accept(connections);
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Connection& c = connections[i - 2];
        if (!Serve(c)) {
          ::close(c.fd);
          c.fd = -1;
        }
      }
      std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
    }
    for (const Connection& c : connections) ::close(c.fd);
  }

  void Accept(std::vector<Connection>& connections) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    int id = ++accepts_;
    if (behavior_ == Behavior::kResetOnAccept) {
      linger reset{1, 0};  // close() then sends RST instead of FIN
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      ::close(fd);
      return;
    }
    connections.push_back({fd, id, {}});
  }

  // Reads what arrived and answers every complete request. False: close the connection.
  bool Serve(Connection& c) {
    char chunk[65536];
    ssize_t n = ::recv(c.fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    if (behavior_ == Behavior::kNeverAnswer) return true;
    c.in.append(chunk, static_cast<size_t>(n));
    for (;;) {
      size_t end = c.in.find("\r\n\r\n");
      if (end == std::string::npos) return true;
      ReceivedRequest request;
      request.connection = c.id;
      std::string_view head(c.in.data(), end);
      size_t line_end = head.find("\r\n");
      std::string_view request_line = head.substr(0, line_end);
      size_t sp1 = request_line.find(' ');
      size_t sp2 = request_line.find(' ', sp1 + 1);
      request.method = std::string(request_line.substr(0, sp1));
      request.target = std::string(request_line.substr(sp1 + 1, sp2 - sp1 - 1));
      size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
      while (pos < head.size()) {
        size_t next = head.find("\r\n", pos);
        if (next == std::string_view::npos) next = head.size();
        std::string_view line = head.substr(pos, next - pos);
        size_t colon = line.find(':');
        if (colon != std::string_view::npos) {
          std::string name = Trimmed(line.substr(0, colon));
          for (char& ch : name) {
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          }
          request.headers[name] = Trimmed(line.substr(colon + 1));
        }
        pos = next + 2;
      }
      size_t body_size = 0;
      if (auto it = request.headers.find("content-length"); it != request.headers.end()) {
        body_size = std::stoul(it->second);
      }
      if (c.in.size() < end + 4 + body_size) return true;  // the body is still arriving
      request.body = c.in.substr(end + 4, body_size);
      c.in.erase(0, end + 4 + body_size);
      std::string response = handler_(request);
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(std::move(request));
      }
      if (!SendAll(c.fd, response)) return false;
      if (behavior_ == Behavior::kRespondThenClose) return false;
    }
  }

  static bool SendAll(int fd, const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  Handler handler_;
  Behavior behavior_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> accepts_{0};
  mutable std::mutex mu_;
  std::vector<ReceivedRequest> requests_;
  std::thread thread_;
};

std::string Reply(int status, const std::string& reason, const std::string& body,
                  const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" +
         body;
}

LoopbackServer::Handler Always(std::string response) {
  return [response](const ReceivedRequest&) { return response; };
}

HttpRequest Request(const std::string& method, const std::string& url) {
  HttpRequest request;
  request.method = method;
  request.url = url;
  return request;
}

std::string Pattern(size_t size) {
  std::string out(size, '\0');
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 7 + 3) % 251);
  return out;
}

std::span<std::byte> AsBytes(std::string& s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size()};
}

TEST(HttpClientTest, GetReturnsStatusHeadersAndBody) {
  LoopbackServer server(Always(Reply(200, "OK", "hello, world", "ETag: \"abc\"\r\n")));
  HttpClient client({});
  HttpRequest request = Request("GET", server.url("/bucket/key?x-id=GetObject"));
  request.headers = {{"X-Amz-Date", "20240101T000000Z"}, {"Range", "bytes=0-11"}, {"X-Empty", ""}};
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "hello, world");
  EXPECT_EQ(response->buffer_bytes, 0u);
  ASSERT_NE(response->header("etag"), nullptr);
  EXPECT_EQ(*response->header("etag"), "\"abc\"");

  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].method, "GET");
  EXPECT_EQ(received[0].target, "/bucket/key?x-id=GetObject");
  EXPECT_EQ(received[0].headers["x-amz-date"], "20240101T000000Z");
  EXPECT_EQ(received[0].headers["range"], "bytes=0-11");
  ASSERT_EQ(received[0].headers.count("x-empty"), 1u);
  EXPECT_EQ(received[0].headers["x-empty"], "");
}

TEST(HttpClientTest, GetIntoResponseBufferThatFitsExactly) {
  const std::string body = Pattern(100000);
  LoopbackServer server(Always(Reply(206, "Partial Content", body)));
  HttpClient client({});
  std::string buffer(body.size(), 'x');
  HttpRequest request = Request("GET", server.url("/b/k"));
  request.response_buffer = AsBytes(buffer);
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 206);
  EXPECT_EQ(response->buffer_bytes, body.size());
  EXPECT_TRUE(response->body.empty());
  EXPECT_EQ(buffer, body);
}

TEST(HttpClientTest, GetIntoLargerBufferReportsTheBytesWritten) {
  LoopbackServer server(Always(Reply(200, "OK", "short")));
  HttpClient client({});
  std::string buffer(64, '.');
  HttpRequest request = Request("GET", server.url("/b/k"));
  request.response_buffer = AsBytes(buffer);
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->buffer_bytes, 5u);
  EXPECT_EQ(buffer.substr(0, 6), "short.");
}

TEST(HttpClientTest, ResponseLargerThanTheBufferIsAnInternalError) {
  LoopbackServer server(Always(Reply(200, "OK", Pattern(5000))));
  HttpClient client({});
  std::string buffer(4999, '\0');
  HttpRequest request = Request("GET", server.url("/b/k"));
  request.response_buffer = AsBytes(buffer);
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kInternal);
  EXPECT_NE(response.status().message().find("response larger than the buffer"), std::string::npos)
      << response.status().message();
}

TEST(HttpClientTest, ErrorResponseGoesToBodyNotToTheBuffer) {
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code>"
      "<Message>The specified key does not exist.</Message></Error>";
  LoopbackServer server(Always(Reply(404, "Not Found", xml, "Content-Type: application/xml\r\n")));
  HttpClient client({});
  std::string buffer(8, '#');
  HttpRequest request = Request("GET", server.url("/b/missing"));
  request.response_buffer = AsBytes(buffer);
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_TRUE(response.ok()) << "an HTTP error status is not a transport error: "
                             << response.status().ToString();
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->body, xml);
  EXPECT_EQ(response->buffer_bytes, 0u);
  EXPECT_EQ(buffer, "########");
}

TEST(HttpClientTest, HeaderNamesAreLowercasedValuesTrimmedInterimHeadersDropped) {
  LoopbackServer server(Always(
      "HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\n" +
      Reply(200, "OK", "ok",
            "X-Amz-Meta-Mode:   33188  \r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n")));
  HttpClient client({});
  Result<HttpResponse> response = client.Perform(Request("GET", server.url("/b/k")));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "ok");
  EXPECT_EQ(response->header("x-interim"), nullptr);
  ASSERT_NE(response->header("x-amz-meta-mode"), nullptr);
  EXPECT_EQ(*response->header("x-amz-meta-mode"), "33188");
  ASSERT_NE(response->header("last-modified"), nullptr);
  EXPECT_EQ(*response->header("last-modified"), "Mon, 01 Jan 2024 00:00:00 GMT");
  ASSERT_NE(response->header("content-length"), nullptr);
  EXPECT_EQ(*response->header("content-length"), "2");
  for (const auto& [name, value] : response->headers) {
    EXPECT_TRUE(std::none_of(name.begin(), name.end(), [](char ch) { return std::isupper(ch); }))
        << name;
  }
}

TEST(HttpClientTest, HeadReadsHeadersAndNoBody) {
  LoopbackServer server(
      Always("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nETag: \"0123\"\r\n\r\n"));
  HttpClient client({});
  Result<HttpResponse> response = client.Perform(Request("HEAD", server.url("/b/k")));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  EXPECT_TRUE(response->body.empty());
  ASSERT_NE(response->header("content-length"), nullptr);
  EXPECT_EQ(*response->header("content-length"), "1234");
  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].method, "HEAD");
  // The connection stays usable: a second request goes over it.
  ASSERT_TRUE(client.Perform(Request("HEAD", server.url("/b/k"))).ok());
  EXPECT_EQ(server.accepts(), 1);
}

TEST(HttpClientTest, PutStreamsExactlyTheSliceOfTheSource) {
  const std::string data = Pattern(300000);
  MemorySource source(data);
  LoopbackServer server(Always(Reply(200, "OK", "", "ETag: \"e\"\r\n")));
  HttpClient client({});
  HttpRequest request = Request("PUT", server.url("/b/part?partNumber=2"));
  request.body_source = &source;
  request.body_offset = 1234;
  request.body_size = 200000;
  request.body = "ignored when a source is given";
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].method, "PUT");
  EXPECT_EQ(received[0].headers["content-length"], "200000");
  EXPECT_EQ(received[0].headers.count("expect"), 0u);
  EXPECT_EQ(received[0].headers.count("transfer-encoding"), 0u);
  EXPECT_TRUE(received[0].body == data.substr(1234, 200000)) << "the uploaded bytes differ";
}

TEST(HttpClientTest, PutFromMemoryBody) {
  LoopbackServer server(Always(Reply(200, "OK", "")));
  HttpClient client({});
  HttpRequest request = Request("PUT", server.url("/b/k"));
  request.body = "in-memory object";
  request.headers = {{"Content-Type", "text/plain"}};
  ASSERT_TRUE(client.Perform(request).ok());
  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].body, "in-memory object");
  EXPECT_EQ(received[0].headers["content-length"], "16");
  EXPECT_EQ(received[0].headers["content-type"], "text/plain");
}

TEST(HttpClientTest, PutWithEmptyBodySendsContentLengthZero) {
  LoopbackServer server(Always(Reply(200, "OK", "")));
  HttpClient client({});
  HttpRequest request = Request("PUT", server.url("/b/dir/"));
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].method, "PUT");
  ASSERT_EQ(received[0].headers.count("content-length"), 1u);
  EXPECT_EQ(received[0].headers["content-length"], "0");
  EXPECT_EQ(received[0].headers.count("transfer-encoding"), 0u);
  EXPECT_TRUE(received[0].body.empty());
}

TEST(HttpClientTest, PostSendsTheBodyWithoutAFormContentType) {
  LoopbackServer server(Always(Reply(200, "OK", "<InitiateMultipartUploadResult/>")));
  HttpClient client({});
  HttpRequest request = Request("POST", server.url("/b/k?uploads"));
  request.body = "<Delete><Object><Key>a</Key></Object></Delete>";
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->body, "<InitiateMultipartUploadResult/>");

  const std::string data = Pattern(70000);
  MemorySource source(data);
  HttpRequest streamed = Request("POST", server.url("/b/k?uploadId=1"));
  streamed.body_source = &source;
  streamed.body_offset = 10;
  streamed.body_size = 60000;
  streamed.headers = {{"Content-Type", "application/xml"}};
  ASSERT_TRUE(client.Perform(streamed).ok());

  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].method, "POST");
  EXPECT_EQ(received[0].body, request.body);
  EXPECT_EQ(received[0].headers["content-length"], std::to_string(request.body.size()));
  EXPECT_EQ(received[0].headers.count("content-type"), 0u);
  EXPECT_EQ(received[1].method, "POST");
  EXPECT_EQ(received[1].headers["content-length"], "60000");
  EXPECT_EQ(received[1].headers["content-type"], "application/xml");
  EXPECT_TRUE(received[1].body == data.substr(10, 60000)) << "the posted bytes differ";
}

TEST(HttpClientTest, DeleteUsesTheDeleteMethod) {
  LoopbackServer server(Always("HTTP/1.1 204 No Content\r\n\r\n"));
  HttpClient client({});
  Result<HttpResponse> response = client.Perform(Request("DELETE", server.url("/b/k")));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 204);
  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].method, "DELETE");
  EXPECT_EQ(received[0].target, "/b/k");
}

TEST(HttpClientTest, SequentialRequestsReuseOneConnection) {
  LoopbackServer server([](const ReceivedRequest& r) { return Reply(200, "OK", r.target); });
  HttpClient client({});
  for (int i = 0; i < 3; ++i) {
    Result<HttpResponse> response =
        client.Perform(Request("GET", server.url("/k" + std::to_string(i))));
    ASSERT_TRUE(response.ok()) << response.status().ToString();
    EXPECT_EQ(response->body, "/k" + std::to_string(i));
  }
  EXPECT_EQ(server.accepts(), 1);
  for (const ReceivedRequest& r : server.requests()) EXPECT_EQ(r.connection, 1);
}

TEST(HttpClientTest, NoIdleHandlesMeansNoReuse) {
  LoopbackServer server(Always(Reply(200, "OK", "x")));
  HttpOptions options;
  options.max_idle_handles = 0;
  HttpClient client(options);
  ASSERT_TRUE(client.Perform(Request("GET", server.url("/a"))).ok());
  ASSERT_TRUE(client.Perform(Request("GET", server.url("/b"))).ok());
  EXPECT_EQ(server.accepts(), 2);
}

TEST(HttpClientTest, ConcurrentRequestsShareThePool) {
  LoopbackServer server([](const ReceivedRequest& r) { return Reply(200, "OK", r.target); });
  HttpClient client({});
  constexpr int kThreads = 6;
  constexpr int kRequests = 20;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRequests; ++i) {
        std::string path = "/t" + std::to_string(t) + "/" + std::to_string(i);
        Result<HttpResponse> response = client.Perform(Request("GET", server.url(path)));
        if (response.ok() && response->status == 200 && response->body == path) ++good;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(good.load(), kThreads * kRequests);
  // At most one handle, hence one connection, per thread at a time.
  EXPECT_LE(server.accepts(), kThreads);
}

TEST(HttpClientTest, ServerClosingAnIdleConnectionIsNotAnError) {
  LoopbackServer server(Always(Reply(200, "OK", "")), LoopbackServer::Behavior::kRespondThenClose);
  HttpClient client({});
  ASSERT_TRUE(client.Perform(Request("GET", server.url("/a"))).ok());
  const std::string data = Pattern(50000);
  MemorySource source(data);
  HttpRequest put = Request("PUT", server.url("/b"));
  put.body_source = &source;
  put.body_size = data.size();
  Result<HttpResponse> response = client.Perform(put);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(server.accepts(), 2);
  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_TRUE(received[1].body == data);
}

TEST(HttpClientTest, RefusedConnectionIsTransientAndNamesHostAndPort) {
  // A bound socket that does not listen: connecting to its port is refused, and holding it
  // keeps the port from being reused by anyone else meanwhile.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  HttpClient client({});
  Result<HttpResponse> response =
      client.Perform(Request("GET", "http://127.0.0.1:" + port + "/b/k"));
  ::close(fd);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kTransient);
  const std::string message = response.status().message();
  EXPECT_NE(message.find("cannot reach 127.0.0.1:" + port), std::string::npos) << message;
  EXPECT_NE(message.find("Connection refused"), std::string::npos) << message;
  EXPECT_NE(message.find("curl: "), std::string::npos) << message;
}

TEST(HttpClientTest, ResetConnectionIsTransient) {
  LoopbackServer server(Always(""), LoopbackServer::Behavior::kResetOnAccept);
  HttpClient client({});
  Result<HttpResponse> response = client.Perform(Request("GET", server.url("/b/k")));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kTransient);
  EXPECT_NE(response.status().message().find(server.host_port()), std::string::npos)
      << response.status().message();
  EXPECT_EQ(server.accepts(), 1);
}

TEST(HttpClientTest, SilentServerHitsTheIdleTimeout) {
  LoopbackServer server(Always(""), LoopbackServer::Behavior::kNeverAnswer);
  HttpOptions options;
  options.idle_timeout_s = 1;
  HttpClient client(options);
  Result<HttpResponse> response = client.Perform(Request("GET", server.url("/b/k")));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kTransient);
  EXPECT_NE(response.status().message().find(server.host_port()), std::string::npos)
      << response.status().message();
  EXPECT_EQ(server.accepts(), 1);
}

TEST(HttpClientTest, TotalTimeoutCutsARequestTheIdleTimeoutWouldLetWait) {
  LoopbackServer server(Always(""), LoopbackServer::Behavior::kNeverAnswer);
  HttpOptions options;
  options.idle_timeout_s = 60;
  HttpClient client(options);
  HttpRequest request = Request("GET", server.url("/b/k"));
  request.total_timeout_ms = 300;
  const auto start = std::chrono::steady_clock::now();
  Result<HttpResponse> response = client.Perform(request);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kTransient);
  EXPECT_LT(took, std::chrono::seconds(5));
}

// Server work: a request with a silence allowance is not held to the low-speed rule (here 1 s),
// yet a server that says nothing at all for the allowance is still cut, and the message says so.
TEST(HttpClientTest, ServerWorkIsCutOnlyAfterItsSilenceAllowance) {
  LoopbackServer server(Always(""), LoopbackServer::Behavior::kNeverAnswer);
  HttpOptions options;
  options.idle_timeout_s = 1;
  HttpClient client(options);
  HttpRequest request = Request("PUT", server.url("/b/copy"));
  request.silence_timeout_ms = 2500;
  const auto start = std::chrono::steady_clock::now();
  Result<HttpResponse> response = client.Perform(request);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kTransient);
  EXPECT_NE(response.status().message().find("the server sent nothing for"), std::string::npos)
      << response.status().message();
  EXPECT_GE(took, std::chrono::milliseconds(2500));
  EXPECT_LT(took, std::chrono::seconds(10));
}

// The caller's abandon check ends a silent request with TimedOut and its reason.
TEST(HttpClientTest, AbandonEndsARequestWithTimedOut) {
  LoopbackServer server(Always(""), LoopbackServer::Behavior::kNeverAnswer);
  HttpOptions options;
  options.idle_timeout_s = 60;
  HttpClient client(options);
  HttpRequest request = Request("PUT", server.url("/b/copy"));
  request.silence_timeout_ms = 60'000;
  std::atomic<int> asked{0};
  request.abandon = [&]() -> std::string { return ++asked >= 2 ? "unmount deadline" : ""; };
  Result<HttpResponse> response = client.Perform(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kTimedOut);
  EXPECT_NE(response.status().message().find("abandoned: unmount deadline"), std::string::npos)
      << response.status().message();
}

// Serves bytes until `fail_at`, then fails like a broken disk.
class FailingSource : public ByteSource {
 public:
  FailingSource(uint64_t size, uint64_t fail_at) : size_(size), fail_at_(fail_at) {}
  uint64_t size() const override { return size_; }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
    if (offset + buf.size() > fail_at_) return IoError("reading staged data: Input/output error");
    std::fill(buf.begin(), buf.end(), std::byte{'z'});
    return buf.size();
  }

 private:
  uint64_t size_;
  uint64_t fail_at_;
};

TEST(HttpClientTest, FailingSourceAbortsTheUploadWithItsOwnError) {
  LoopbackServer server(Always(Reply(200, "OK", "")));
  HttpClient client({});
  // A working request first, so the failure happens on a pooled, kept-alive connection.
  ASSERT_TRUE(client.Perform(Request("GET", server.url("/warm"))).ok());

  FailingSource source(1 << 20, 100000);
  HttpRequest put = Request("PUT", server.url("/b/k"));
  put.body_source = &source;
  put.body_size = source.size();
  Result<HttpResponse> response = client.Perform(put);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kIoError);
  EXPECT_EQ(response.status().message(), "reading staged data: Input/output error");

  // The handle with the half-sent request was dropped: the next request opens a new connection.
  Result<HttpResponse> after = client.Perform(Request("GET", server.url("/after")));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(server.accepts(), 2);
  std::vector<ReceivedRequest> received = server.requests();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[1].target, "/after");
  EXPECT_EQ(received[1].connection, 2);
}

TEST(HttpClientTest, SourceEndingEarlyIsAnIoError) {
  LoopbackServer server(Always(Reply(200, "OK", "")));
  HttpClient client({});
  const std::string data = Pattern(1000);
  MemorySource source(data);
  // A source that claims more bytes than it yields.
  class ShortSource : public ByteSource {
   public:
    explicit ShortSource(const ByteSource& inner) : inner_(inner) {}
    uint64_t size() const override { return 5000; }
    Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
      return inner_.read_at(offset, buf);
    }

   private:
    const ByteSource& inner_;
  } short_source(source);
  HttpRequest put = Request("PUT", server.url("/b/k"));
  put.body_source = &short_source;
  put.body_size = 5000;
  Result<HttpResponse> response = client.Perform(put);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kIoError) << response.status().ToString();
}

TEST(HttpClientTest, RequestsTheTransportCannotExpressAreRejected) {
  HttpClient client({});
  EXPECT_EQ(client.Perform(Request("PATCH", "http://127.0.0.1:1/")).status().code(),
            StatusCode::kInvalidArgument);

  MemorySource source(std::string_view("0123456789"));
  HttpRequest put = Request("PUT", "http://127.0.0.1:1/");
  put.body_source = &source;
  put.body_offset = 8;
  put.body_size = 3;
  EXPECT_EQ(client.Perform(put).status().code(), StatusCode::kInvalidArgument);

  HttpRequest get = Request("GET", "http://127.0.0.1:1/");
  get.body = "a GET has no body";
  EXPECT_EQ(client.Perform(get).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace objfs::s3
