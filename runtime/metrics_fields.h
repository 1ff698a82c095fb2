#pragma once
// The fields of a metrics.jsonl record, declared once: engine/step_log.cpp
// writes them, and report/ (run_report.cpp, run_files.cpp's time to go),
// planning/ (smoke_figures.cpp, calibration_plan.cpp) and app/cmd_status.cpp
// read them, so a writer and a reader cannot spell one two ways. docs/ARCHITECTURE.md ("Metrics") says what each holds.
#include <string>

namespace trainer::metrics_field {

// Every logged step.
inline constexpr const char *kStep = "step", *kLoss = "loss", *kLr = "lr", *kGradNorm = "grad_norm",
                            *kTokensPerS = "tokens_per_s", *kMfu = "mfu", *kStepMs = "step_ms",
                            *kDataWaitMs = "data_wait_ms", *kHostSyncs = "host_syncs", *kPrecision = "precision",
                            *kTime = "time";
// When it happened: a skipped update (and why), an evaluation, a save.
inline constexpr const char *kUpdateSkipped = "update_skipped", *kLossSpike = "loss_spike", *kValLoss = "val_loss",
                            *kValWindows = "val_windows", *kCkptMs = "ckpt_ms";
// A straggler report naming ranks.
inline constexpr const char *kStragglers = "stragglers", *kStragglerComputeMs = "straggler_compute_ms",
                            *kStragglerRatio = "straggler_ratio", *kComputeMsMedian = "compute_ms_median";
// Data-parallel reduction time not hidden behind the backward, and its span.
inline constexpr const char *kCommDpExposedMs = "comm_dp_exposed_ms", *kCommDpSpanMs = "comm_dp_span_ms";
// Context parallelism: the ring's transfer time not hidden behind its
// attention, and the attention-work imbalance across its group.
inline constexpr const char *kCommCpExposedMs = "comm_cp_exposed_ms", *kCpImbalance = "cp_imbalance";
// Mixture-of-Experts: the router's balancing loss and z-loss (summed over
// the MoE layers, each a mean over the batch's tokens), which the gradient
// follows beside the cross entropy `loss` is.
inline constexpr const char *kMoeAuxLoss = "moe_aux_loss", *kMoeZLoss = "moe_z_loss";
// Lists, one value per layer (a dense layer's 0): the most tokens one of
// its experts was chosen by over the global batch (dropped ones too), the
// mean over its experts, the share of its token-expert pairs dropped past a
// capacity, its router's balancing and z-losses.
inline constexpr const char *kMoeTokensMax = "moe_tokens_max", *kMoeTokensMean = "moe_tokens_mean",
                            *kMoeDropped = "moe_dropped", *kMoeLayerAuxLoss = "moe_layer_aux_loss",
                            *kMoeLayerZLoss = "moe_layer_z_loss";
// Lists, one value per pipeline stage.
inline constexpr const char *kPpComputeMs = "pp_compute_ms", *kPpWaitMs = "pp_wait_ms", *kPpSpanMs = "pp_span_ms",
                            *kPpPeakInFlight = "pp_peak_in_flight";

// Fields named by what they count.
inline std::string val_loss_of(const std::string& source) { return std::string(kValLoss) + "/" + source; }
inline std::string samples_of(const std::string& source) { return "samples/" + source; }
// "comm_dp_allreduce_" + "bytes" / "ms": a group's bytes and time per kind of collective.
inline std::string comm_of(const std::string& group, const std::string& kind) {
  return "comm_" + group + "_" + kind + "_";
}
inline std::string mem_peak_of(const std::string& kind) { return "mem_peak_" + kind + "_mb"; }

}  // namespace trainer::metrics_field
