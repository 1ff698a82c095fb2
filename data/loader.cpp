#include "data/loader.h"

namespace trainer {

Loader::Loader(const TokenDataset& ds, const LoaderConfig& cfg)
    : ds_(ds), cfg_(cfg), accum_(cfg.global_batch / (cfg.micro_batch * cfg.dp_size)),
      order_(ds.num_samples(), cfg.seed, cfg.shuffle) {
  if (cfg_.prefetch > 0) thread_ = std::thread(&Loader::worker, this);
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
  const uint64_t step = index / accum_, micro = index % accum_;
  const uint64_t per_rank = (uint64_t)cfg_.global_batch / cfg_.dp_size;
  const uint64_t first = cfg_.start_position + step * cfg_.global_batch +
                         cfg_.dp_rank * per_rank + micro * cfg_.micro_batch;
  const int T = ds_.seq_len();
  Batch b;
  b.first_position = first;
  b.inputs.resize((size_t)cfg_.micro_batch * T);
  b.targets.resize((size_t)cfg_.micro_batch * T);
  for (int i = 0; i < cfg_.micro_batch; i++)
    ds_.read_sample(order_.at(first + i), b.inputs.data() + (size_t)i * T,
                    b.targets.data() + (size_t)i * T);
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
  return cfg_.start_position + (consumed_ / accum_) * (uint64_t)cfg_.global_batch;
}

}  // namespace trainer
