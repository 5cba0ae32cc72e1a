// `objfs stats MOUNTPOINT`: a mount's counters, readable by an operator.
//
// The counters are user.objfs.stats on the mount's root ("name=value" lines, for scripts and
// getfattr); this command reads them the same way and prints first what an operator watches
// (uploads still pending, bytes staged, requests in flight, failed operations), then every
// counter, byte counts with a binary unit beside them.
#pragma once

#include <string>
#include <vector>

namespace objfs {

// The readable text of a user.objfs.stats value.
std::string FormatStats(const std::string& stats);

// `args`: what follows "stats" on the command line. Prints to stdout; errors are one line on
// stderr and exit status 1 (2 for a usage error).
int RunStats(const std::vector<std::string>& args);

}  // namespace objfs
