#pragma once
// The trainer's version, recorded in checkpoint manifests (and shown by
// `trainer ckpt inspect`).
namespace trainer {
constexpr const char* kTrainerVersion = "0.1.0";
}  // namespace trainer
