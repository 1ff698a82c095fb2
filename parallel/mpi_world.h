#pragma once
// Job-wide helpers over MPI_COMM_WORLD, for the set-up and the commands that
// run under mpirun (train, smoke, calibrate): what runs before, or outside,
// the process grid's recorded communicators.
#include <string>
#include <vector>

namespace trainer {

class PeerProbe;

// Ranks of this job on this node (they share its cores, memory and GPUs).
int ranks_on_node();
// Rank 0's value, on every rank.
std::string broadcast_string(std::string s);
double broadcast_double(double v);
void broadcast_ints(std::vector<int>& v);
void broadcast_strings(std::vector<std::string>& v);
// Every rank's line, in rank order (each cut or padded to `width` - 1 characters).
std::vector<std::string> allgather_lines(std::string mine, int width);
// Every rank's probe address given to every rank's probe (collective).
void swap_probe_addresses(PeerProbe& probe);
// A failure inside the training loop may hit one rank only (its slice of the
// data); the others would wait in a collective forever, so abort the job.
[[noreturn]] void abort_job(int code, const std::string& msg);

}  // namespace trainer
