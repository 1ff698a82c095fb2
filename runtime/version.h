#pragma once
// The trainer's version, recorded in checkpoint manifests (and shown by
// `trainer ckpt inspect`) and in each launch's record (launches.jsonl).
namespace trainer {
constexpr const char* kTrainerVersion = "0.1.0";

// The git commit the executable was built from. Defined in
// app/cmd_version.cpp, the one file that sees the generated header (so a new
// commit recompiles one file); binaries without it (tests) say "unknown".
const char* trainer_git_commit();
}  // namespace trainer
