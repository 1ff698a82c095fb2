// The metrics log (runtime/metrics.h) after a kill cut its last line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "runtime/metrics.h"

namespace trainer {
namespace {

// A metrics log whose last line was cut off by a kill: the next record starts
// a line of its own (before, it was appended to the fragment and both were
// lost to every JSON reader); the fragment stays as its own line.
TEST(MetricsLog, ReopeningStartsANewLineAfterAPartialOne) {
  const std::string path = testing::TempDir() + "/metrics_partial.jsonl";
  for (const std::string& tail : {std::string("{\"step\": 3, \"lo"), std::string(9000, 'x'), std::string()}) {
    std::ofstream(path) << "{\"step\": 1}\n{\"step\": 2}\n" << tail;
    {
      MetricsLog log(path, false);
      JsonRecord r;
      r.add("step", 4L);
      log.write(r);
    }
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), tail.empty() ? 3u : 4u) << "tail of " << tail.size() << " bytes";
    for (size_t i : {(size_t)0, (size_t)1, lines.size() - 1}) EXPECT_NO_THROW((void)nlohmann::json::parse(lines[i]));
    if (!tail.empty()) EXPECT_EQ(lines[2], tail);
    EXPECT_EQ(lines.back(), "{\"step\": 4}");
  }
}

}  // namespace
}  // namespace trainer
