#include "data/loader.h"

#include "runtime/rng.h"

namespace trainer {

Loader::Loader(const Blend& data, const LoaderConfig& cfg)
    : data_(data), cfg_(cfg), blend_(data.shares()) {
  for (size_t j = 0; j < data_.sources().size(); j++) {
    // Source 0 of a single source uses the run's seed as is: a plain
    // dataset's order is unchanged by blending's existence.
    const uint64_t seed = data_.blended() ? cfg.seed ^ hash_string("data.blend." + std::to_string(j)) : cfg.seed;
    orders_.emplace_back(data_.sources()[j].data->num_samples(), seed, cfg.shuffle);
  }
  if (cfg_.prefetch > 0) thread_ = std::thread(&Loader::worker, this);
}

void Loader::read(uint64_t position, int32_t* inputs, int32_t* targets) {
  uint64_t nth = position;
  const size_t j = data_.blended() ? blend_.source_at(position, &nth) : 0;
  data_.sources()[j].data->read_sample(orders_[j].at(nth), inputs, targets);
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Batch Loader::load(uint64_t index) {
  const uint64_t step = index / cfg_.micro_batches, micro = index % cfg_.micro_batches;
  const uint64_t per_rank = (uint64_t)cfg_.micro_batches * cfg_.micro_batch;
  const uint64_t first = cfg_.start_position + step * cfg_.global_batch() +
                         cfg_.dp_rank * per_rank + micro * cfg_.micro_batch;
  const int T = data_.seq_len();
  Batch b;
  b.first_position = first;
  b.inputs.resize((size_t)cfg_.micro_batch * T);
  b.targets.resize((size_t)cfg_.micro_batch * T);
  for (int i = 0; i < cfg_.micro_batch; i++)
    read(first + i, b.inputs.data() + (size_t)i * T, b.targets.data() + (size_t)i * T);
  return b;
}

void Loader::worker() {
  for (uint64_t index = 0;; index++) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || (int)queue_.size() < cfg_.prefetch; });
      if (stop_) return;
    }
    try {
      Batch b = load(index);
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
}

Batch Loader::next() {
  if (cfg_.prefetch <= 0) return load(consumed_++);
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !queue_.empty() || error_; });
  if (queue_.empty()) std::rethrow_exception(error_);
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  consumed_++;
  lk.unlock();
  cv_.notify_all();
  return b;
}

uint64_t Loader::cursor() const {
  return cfg_.start_position + (consumed_ / cfg_.micro_batches) * cfg_.global_batch();
}

}  // namespace trainer
