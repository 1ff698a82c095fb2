// The data path: shard format errors, sample order determinism, exactly-once
// coverage across DP ranks, and prefetching that never changes what a step sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "data/blend.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/sample_order.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "runtime/errors.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/trainer_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Token t at position i is i % 251, so a sample's content tells its index.
std::string make_shard(const TempDir& d, const std::string& name, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; i++) t[i] = i % 251;
  write_token_shard(d.file(name), t);
  return d.file(name);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// The stream position each sequence of a batch came from, read back through
// the shard's content (first input token = (sample*T) % 251 for one shard).
std::vector<std::vector<int32_t>> drain(Loader& ld, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; i++) {
    Batch b = ld.next();
    out.push_back(b.inputs);
    out.back().insert(out.back().end(), b.targets.begin(), b.targets.end());
  }
  return out;
}

}  // namespace

TEST(Shard, RoundTripNarrowAndWide) {
  TempDir d;
  write_token_shard(d.file("a.bin"), {1, 2, 65535});
  write_token_shard(d.file("b.bin"), {1, 70000});
  TokenShard a(d.file("a.bin")), b(d.file("b.bin"));
  EXPECT_EQ(a.token_bytes(), 2);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a.token(2), 65535u);
  EXPECT_EQ(b.token_bytes(), 4);
  EXPECT_EQ(b.token(1), 70000u);
  EXPECT_EQ(fs::file_size(d.file("a.bin")), 1024u + 3 * 2);  // llm.c layout
}

TEST(Shard, BadMagicNamesFileAndOffset) {
  TempDir d;
  std::ofstream(d.file("x.bin"), std::ios::binary) << std::string(2000, 'x');
  const std::string e = error_of([&] { TokenShard s(d.file("x.bin")); });
  EXPECT_NE(e.find(d.file("x.bin")), std::string::npos) << e;
  EXPECT_NE(e.find("magic at byte offset 0"), std::string::npos) << e;
}

TEST(Shard, TruncatedShardIsReported) {
  TempDir d;
  const std::string p = make_shard(d, "t.bin", 1000);
  fs::resize_file(p, 1024 + 500 * 2 + 1);
  const std::string e = error_of([&] { TokenShard s(p); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(p), std::string::npos) << e;
  fs::resize_file(p, 100);
  EXPECT_NE(error_of([&] { TokenShard s(p); }).find("shorter than the 1024-byte header"), std::string::npos);
}

TEST(Dataset, TokenBeyondVocabNamesFileAndOffset) {
  TempDir d;
  std::vector<uint32_t> t(100, 7);
  t[42] = 300;
  write_token_shard(d.file("v.bin"), t);
  // Up front: the whole shard is checked when the dataset opens.
  const std::string first = error_of([&] { TokenDataset({d.file("v.bin")}, 10, 256); });
  EXPECT_NE(first.find("token id 300 at token 42 (byte offset 1108)"), std::string::npos) << first;
  // And where a sample reads it, when the up-front check is off.
  TokenDataset ds({d.file("v.bin")}, 10, 256, false);
  std::vector<int32_t> in(10), tg(10);
  ds.read_sample(3, in.data(), tg.data());  // tokens 30..40: fine
  const std::string e = error_of([&] { ds.read_sample(4, in.data(), tg.data()); });
  EXPECT_NE(e.find("token id 300 at token 42 (byte offset 1108)"), std::string::npos) << e;
  EXPECT_NE(e.find(d.file("v.bin")), std::string::npos) << e;
}

TEST(Dataset, EmptyGlobIsAnError) {
  TempDir d;
  const std::string e = error_of([&] { expand_paths({d.file("nothing_*.bin")}); });
  EXPECT_NE(e.find("nothing_*.bin"), std::string::npos) << e;
}

TEST(Dataset, SamplesAreShiftedWindows) {
  TempDir d;
  make_shard(d, "s0.bin", 41);  // 4 samples of T=10
  make_shard(d, "s1.bin", 25);  // 2 samples
  TokenDataset ds(expand_paths({d.file("s*.bin")}), 10, 256);
  ASSERT_EQ(ds.num_samples(), 6u);
  std::vector<int32_t> in(10), tg(10);
  ds.read_sample(5, in.data(), tg.data());  // shard 1, sample 1: tokens 10..20
  for (int t = 0; t < 10; t++) {
    EXPECT_EQ(in[t], 10 + t);
    EXPECT_EQ(tg[t], 11 + t);
  }
}

TEST(SampleOrder, PureFunctionOfSeedAndEpoch) {
  EXPECT_EQ(epoch_permutation(1000, 5, 0), epoch_permutation(1000, 5, 0));
  EXPECT_NE(epoch_permutation(1000, 5, 0), epoch_permutation(1000, 5, 1));
  EXPECT_NE(epoch_permutation(1000, 5, 0), epoch_permutation(1000, 6, 0));
  auto p = epoch_permutation(1000, 5, 0);
  std::sort(p.begin(), p.end());
  for (uint32_t i = 0; i < 1000; i++) ASSERT_EQ(p[i], i);
  // Fixed values: the order must not change between platforms or releases,
  // or resumed runs would see other batches.
  const std::vector<uint32_t> q = {1, 2, 7, 5, 9, 6, 8, 0, 3, 4};
  EXPECT_EQ(epoch_permutation(10, 1234, 0), q);
  SampleOrder o(10, 1234, true);
  for (int i = 0; i < 10; i++) EXPECT_EQ(o.at(i), q[i]);
}

TEST(Loader, EverySampleExactlyOncePerEpochAcrossDpRanks) {
  TempDir d;
  const int T = 8, N = 96;
  make_shard(d, "c.bin", N * T + 1);
  TokenDataset ds({d.file("c.bin")}, T, 256);
  ASSERT_EQ(ds.num_samples(), (size_t)N);
  for (int dp : {1, 2, 3, 4}) {
    std::multiset<int32_t> seen;  // first token of each sample identifies it
    std::map<int32_t, int> first_token_to_sample;
    for (int s = 0; s < N; s++) first_token_to_sample[(s * T) % 251] = s;
    for (int r = 0; r < dp; r++) {
      LoaderConfig c;
      c.micro_batch = 2;
      c.dp_rank = r;
      c.dp_size = dp;
      c.prefetch = 3;
      c.seed = 99;
      const int global_batch = 12 % (c.micro_batch * dp) ? 24 : 12;
      c.micro_batches = global_batch / (c.micro_batch * dp);
      Loader ld(ds, c);
      const int micro = N / dp / c.micro_batch;  // one epoch's share
      for (int i = 0; i < micro; i++) {
        Batch b = ld.next();
        for (int q = 0; q < c.micro_batch; q++) seen.insert(b.inputs[q * T]);
      }
    }
    ASSERT_EQ(seen.size(), (size_t)N) << "dp=" << dp;
    for (const auto& [tok, s] : first_token_to_sample) EXPECT_EQ(seen.count(tok), 1u) << "dp=" << dp;
  }
}

TEST(Loader, DeterministicAndPrefetchDoesNotChangeBatches) {
  TempDir d;
  make_shard(d, "p.bin", 5000);
  TokenDataset ds({d.file("p.bin")}, 16, 256);
  LoaderConfig c;
  c.micro_batch = 2;
  c.micro_batches = 2;  // a global batch of 8
  c.dp_size = 2;
  c.dp_rank = 1;
  c.seed = 7;
  std::vector<std::vector<std::vector<int32_t>>> runs;
  for (int prefetch : {0, 1, 4, 0}) {
    c.prefetch = prefetch;
    Loader ld(ds, c);
    runs.push_back(drain(ld, 50));  // 100 of the 312 samples
    EXPECT_EQ(ld.cursor(), 25u * 8u) << "cursor after 25 steps";
  }
  for (size_t i = 1; i < runs.size(); i++) EXPECT_EQ(runs[i], runs[0]) << "run " << i;
  c.seed = 8;
  Loader other(ds, c);
  EXPECT_NE(drain(other, 50), runs[0]);
}

TEST(Loader, StartPositionResumesTheStream) {
  TempDir d;
  make_shard(d, "r.bin", 3000);
  TokenDataset ds({d.file("r.bin")}, 16, 256);
  LoaderConfig c;
  c.micro_batch = 2;
  c.micro_batches = 2;  // a global batch of 4
  c.seed = 3;
  Loader full(ds, c);
  auto all = drain(full, 20);
  c.start_position = 5 * 4;  // after 5 steps
  Loader resumed(ds, c);
  auto tail = drain(resumed, 10);
  for (int i = 0; i < 10; i++) EXPECT_EQ(tail[i], all[10 + i]);
}

TEST(Loader, WorkerErrorReachesTheCaller) {
  TempDir d;
  std::vector<uint32_t> t(400, 1);
  t[350] = 999;
  write_token_shard(d.file("e.bin"), t);
  TokenDataset ds({d.file("e.bin")}, 10, 256, false);  // the error must come from the worker
  LoaderConfig c;
  c.micro_batch = 39;
  c.shuffle = false;
  c.prefetch = 2;
  Loader ld(ds, c);
  const std::string e = error_of([&] { ld.next(); });
  EXPECT_NE(e.find("token id 999"), std::string::npos) << e;
}

TEST(Prepare, BytesOfTheInputFilesWithValidationTail) {
  TempDir d;
  fs::create_directories(d.path / "in" / "sub");
  std::ofstream(d.path / "in" / "b.txt") << "world";
  std::ofstream(d.path / "in" / "sub" / "a.txt") << "hello";
  fs::create_symlink(d.path / "in" / "b.txt", d.path / "in" / "c_link.txt");  // read once
  PrepareConfig c;
  c.inputs = {(d.path / "in").string()};
  c.output_dir = d.file("out");
  c.val_fraction = 0.25;
  const PrepareResult r = prepare_tokens(c);
  EXPECT_EQ(r.files, 2u);
  // sorted: in/b.txt, in/c_link.txt (dup, skipped), in/sub/a.txt
  const std::string text = "world\nhello\n";
  TokenShard tr(r.train_shards.at(0)), va(r.val_shards.at(0));
  ASSERT_EQ(tr.size() + va.size(), text.size());
  EXPECT_EQ(va.size(), 3u);
  for (size_t i = 0; i < text.size(); i++)
    EXPECT_EQ(i < tr.size() ? tr.token(i) : va.token(i - tr.size()), (uint32_t)(unsigned char)text[i]);
}

TEST(Prepare, JsonlLinesAreDocumentsAndABadLineNamesFileAndLine) {
  TempDir d;
  std::ofstream(d.file("a.jsonl")) << "{\"text\": \"ab\"}\n\n{\"text\": \"c\", \"id\": 2}\n";
  PrepareConfig c;
  c.inputs = {d.file("a.jsonl")};
  c.output_dir = d.file("out");
  c.val_fraction = 0;
  const PrepareResult r = prepare_tokens(c);
  EXPECT_EQ(r.documents, 2u);
  TokenShard tr(r.train_shards.at(0));
  const std::vector<uint32_t> want = {'a', 'b', '\n', 'c', '\n'};  // bytes: "\n" ends each document
  ASSERT_EQ(tr.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(tr.token(i), want[i]);
  std::ofstream(d.file("b.jsonl")) << "{\"text\": \"ok\"}\n{\"txt\": \"no key\"}\n";
  c.inputs = {d.file("b.jsonl")};
  c.output_dir = d.file("out2");
  std::string e = error_of([&] { prepare_tokens(c); });
  EXPECT_NE(e.find("b.jsonl:2: no string \"text\""), std::string::npos) << e;
  std::ofstream(d.file("c.jsonl")) << "{\"text\": \"ok\"}\n{broken\n";
  c.inputs = {d.file("c.jsonl")};
  e = error_of([&] { prepare_tokens(c); });
  EXPECT_NE(e.find("c.jsonl:2: not a JSON object"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(d.file("out2") + "/train_000000.bin"));
}

TEST(Prepare, InvalidUtf8BytesBecomeReplacementCharacters) {
  std::string s = "a\xff" "b\xc3\xa9" "\xe2\x82" "c";  // a stray byte, a valid e-acute, a cut 3-byte sequence
  EXPECT_EQ(repair_utf8(s), 3u);
  EXPECT_EQ(s, "a\xef\xbf\xbd" "b\xc3\xa9" "\xef\xbf\xbd\xef\xbf\xbd" "c");
  std::string ok = "plain \xf0\x9f\x98\x80";
  EXPECT_EQ(repair_utf8(ok), 0u);
}

TEST(Blend, CountsFollowMegatronsRuleAndRestartFromAnyPosition) {
  // The rule written out as a plain loop: the source lagging its share most.
  const std::vector<double> w = {0.2, 0.5, 0.3};
  std::vector<uint64_t> c(3, 0);
  std::vector<size_t> src;
  for (uint64_t p = 0; p < 1000; p++) {
    size_t best = 0;
    for (size_t j = 1; j < 3; j++)
      if (w[j] * std::max<double>((double)p, 1) - c[j] > w[best] * std::max<double>((double)p, 1) - c[best]) best = j;
    src.push_back(best);
    c[best]++;
  }
  BlendOrder order(w);
  uint64_t nth = 0;
  for (uint64_t p : {0ull, 5ull, 999ull, 3ull, 500ull}) {  // forwards and backwards
    const size_t j = order.source_at(p, &nth);
    EXPECT_EQ(j, src[p]) << p;
    EXPECT_EQ(nth, (uint64_t)std::count(src.begin(), src.begin() + p, j)) << p;
  }
  EXPECT_EQ(order.counts_before(1000), c);
}
