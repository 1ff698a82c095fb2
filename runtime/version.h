#pragma once
// The trainer's version: recorded in checkpoint manifests and printed by
// `trainer --version`.
namespace trainer {
constexpr const char* kTrainerVersion = "0.1.0";
}  // namespace trainer
