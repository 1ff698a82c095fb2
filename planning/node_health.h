#pragma once
// `trainer health` (issue 49): every node of the job measures in a few
// seconds what a training step needs, and is compared with the others. A
// node whose figure is below min_ratio of the median over the nodes is slow;
// one whose measurement failed is failed. The first rank of each node
// measures (the others wait), so launch with any number of ranks per node.
#include <mpi.h>

#include <string>
#include <vector>

#include "runtime/backend.h"

namespace trainer {

// What one node measured (0: the measurement failed; `failed` says why).
struct NodeFigures {
  std::string host;
  int first_rank = 0;         // the rank that measured
  double gemm_gflops = 0;     // square fp32 products on the run's backend, sustained over 0.3 s
  double memory_gbps = 0;     // bytes copied per second through host memory (read + write)
  double free_gb = 0;         // host memory this process could still get
  double disk_mbps = 0;       // writing and fsyncing a file in the checkpoint directory
  int disk_error = 0;         // the errno when that failed
  double allreduce_gbps = 0;  // a 16 MB all-reduce over all nodes (bytes / time)
  double p2p_gbps = 0;        // send + receive with each other node, the median over them
  double gpu_clock_mhz = -1;  // the SM clock of the GPU the product ran on, read after it (NVML); -1: none
  std::string failed;
  // What the driver says is wrong with the node's GPUs, any of them
  // (runtime/gpu_state.h gpu_fault): failing or, unless gpu_fails, slow.
  std::string gpu_fault;
  bool gpu_fails = false;
  std::string gpu_note;  // on a GPU backend: why its GPUs have no figures ("" when they have)
};

// The figures, by name, in table order; higher is better for each.
struct FigureKind {
  const char* name;
  const char* unit;
  double NodeFigures::*value;
};
const std::vector<FigureKind>& figure_kinds();

enum class Health { Ok, Slow, Failed };
struct NodeVerdict {
  Health health = Health::Ok;
  std::vector<double> ratios;       // each figure over its median, in figure_kinds() order
  std::vector<std::string> reasons;  // "gemm 0.25 x the median", or why it failed
  std::vector<std::string> slow_in;  // what made it slow: the figures below the bar ("gemm"), "gpu"
};
// Pure: each figure against the median over the nodes.
std::vector<NodeVerdict> judge_nodes(const std::vector<NodeFigures>& nodes, double min_ratio);
// A second measurement's verdicts against the first's (the same nodes in the
// same order): a node is unfit only when both found it so, and a slow one
// only when both found the same thing slow, so one noisy figure (a link
// another job's burst shared for a moment, then a product that shared a
// core) excludes no node.
// An unfit node keeps the second's verdict and says it was confirmed; one
// that passed the second time is ok and says what the first had found.
std::vector<NodeVerdict> confirm_verdicts(const std::vector<NodeVerdict>& first,
                                          const std::vector<NodeVerdict>& second);
// Whether any verdict is slow or failed.
bool any_unfit(const std::vector<NodeVerdict>& verdicts);

// Collective over `world`: each node's first rank measures; every rank gets
// every node's figures, in the order of their first ranks. in_turn: the
// nodes measure their own figures one after another, not all at once (nodes
// that share hardware, as a fake cluster's hosts share one machine's cores).
// disk_mb: what a checkpoint of the node's ranks needs (at most 32 MB): the
// disk probe writes that where disk_dir's disk has under 64 MB to spare
// beyond it, else 32 MB.
std::vector<NodeFigures> measure_nodes(MPI_Comm world, Backend& be, const std::string& disk_dir, double disk_mb,
                                       bool in_turn);

// A disk failure every node shares (the same errno on every node's probe of
// disk_dir): the path's, not the nodes' (a full or read-only checkpoint file
// system). "" when there is none; else the message, and *code: 8 (no space,
// quota) or 2 (a directory that cannot be written).
std::string shared_disk_failure(const std::vector<NodeFigures>& nodes, const std::string& disk_dir, double disk_mb,
                                int* code);

}  // namespace trainer
