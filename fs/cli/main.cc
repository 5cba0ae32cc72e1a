// The shipped objfs: the command line with the s3:// and sftp:// schemes (cli/mount.h).
#include "fs/cli/mount.h"

int main(int argc, char** argv) { return objfs::RunObjfs(argc, argv, objfs::StandardSchemes()); }
