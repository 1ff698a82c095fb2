#pragma once
// The sgemm peak MFU is measured against, measured once per machine and
// launch shape and kept in a small cache file, so MFU does not swing with
// the noise of a short measurement at every start (55-100 GFLOP/s per rank
// were seen on one shared machine). The file (app/environment.h says where
// it is; "" for none) holds one line per key: "KEY<TAB>GFLOPS<TAB>WHEN".
// Delete it to measure again.
#include <string>

namespace trainer {

// The key of this machine and launch shape: host, CPU model, the BLAS
// library (version, build and the kernels it runs), threads per rank and
// ranks on this node (they share the cores).
std::string peak_cache_key(int threads, int ranks_on_node);

// The cached peak (GFLOP/s per rank) and when it was measured; 0 if none.
double read_cached_peak(const std::string& file, const std::string& key, std::string* when);

// Adds or replaces the key's line; false (silently) when the file cannot be written.
bool write_cached_peak(const std::string& file, const std::string& key, double gflops);
// Drops the key's line (a run computed faster than it: the next start measures again).
bool forget_cached_peak(const std::string& file, const std::string& key);

}  // namespace trainer
