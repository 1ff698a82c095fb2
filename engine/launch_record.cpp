#include "engine/launch_record.h"

#include <unistd.h>

#include "runtime/cpu/blas_core.h"
#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/host_name.h"
#include "runtime/library_versions.h"
#include "runtime/utc_time.h"
#include "runtime/version.h"

namespace trainer {

std::string append_launch_record(const Job& job, long first_step) {
  const Recipe& r = job.recipe;
  std::string libraries = mpi_library_version() + ", " + hdf5_library_version() + ", " + blas_library_version();
  if (const std::string gpu = backend_library_versions(); !gpu.empty()) libraries += ", " + gpu;
  JsonRecord rec;
  rec.add("time", iso_time(wall_seconds()))
      .add("first_step", first_step)
      .add("steps", r.training.steps)
      .add("resumed_from", job.resumed_from)
      .add("trainer", std::string(kTrainerVersion))
      .add("git", std::string(trainer_git_commit()))
      .add("backend", job.backend->name())
      .add("device", job.backend->device_name())
      .add("host", host_name())
      .add("ranks", job.grid->world().size());
  each_grid_dim_slowest_first([&](const GridDim& d, GridDims) { rec.add(d.name, r.parallel.grid.*d.size); });
  rec.add("peak_gflops", job.peak_gflops)
      .add("peak_source", job.peak_source)
      .add("libraries", libraries);
  // A fresh start (not resumed) begins a new file, as metrics.jsonl does.
  try {
    MetricsLog log(r.run.dir + "/launches.jsonl", job.resumed_from.empty());
    return log.write(rec) ? "" : log.error();
  } catch (const UserError& e) {
    return e.what();
  }
}

}  // namespace trainer
