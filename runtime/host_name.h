#pragma once
// This machine's host name, as every record that names a host uses it
// (flight recorder dumps, crash reports, launch records, health tables).
#include <string>

namespace trainer {

std::string host_name();

// Whether two names are the same host: equal, or a short name and a
// qualified one that starts with it (Slurm's "node7" and gethostname's
// "node7.cluster.local"). Two qualified names ("n1.a", "n1.b") or IP
// addresses must be equal.
bool same_host(const std::string& a, const std::string& b);

}  // namespace trainer
