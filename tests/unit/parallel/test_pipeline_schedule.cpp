// Pipeline schedules without a model: every action exactly once, no stage
// waits on a message that is never sent, the idle time equals the textbook
// bubble, and 1F1B keeps at most pp micro-batches in flight.
#include <gtest/gtest.h>

#include <map>

#include "parallel/pipeline_schedule.h"

using namespace trainer;

namespace {

void expect_complete(const PipelineSpec& p, const std::vector<std::vector<PipeAction>>& sched) {
  for (int s = 0; s < p.stages; s++) {
    std::map<std::tuple<int, int, int>, int> seen;  // (op, mb, chunk)
    for (const PipeAction& a : sched[s]) seen[{(int)a.op, a.mb, a.chunk}]++;
    for (int c = 0; c < p.virtual_stages; c++)
      for (int mb = 0; mb < p.micro_batches; mb++) {
        EXPECT_EQ((seen[{(int)PipeOp::Forward, mb, c}]), 1) << "stage " << s << " mb " << mb << " chunk " << c;
        EXPECT_EQ((seen[{(int)PipeOp::Backward, mb, c}]), 1) << "stage " << s << " mb " << mb << " chunk " << c;
        const bool first = s == 0 && c == 0, last = s == p.stages - 1 && c == p.virtual_stages - 1;
        EXPECT_EQ((seen[{(int)PipeOp::RecvAct, mb, c}]), first ? 0 : 1);
        EXPECT_EQ((seen[{(int)PipeOp::SendAct, mb, c}]), last ? 0 : 1);
        EXPECT_EQ((seen[{(int)PipeOp::RecvGrad, mb, c}]), last ? 0 : 1);
        EXPECT_EQ((seen[{(int)PipeOp::SendGrad, mb, c}]), first ? 0 : 1);
      }
  }
}

}  // namespace

TEST(Schedule, OneFOneBIsCompleteDeadlockFreeWithTextbookBubble) {
  for (int P : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 4, 7, 16}) {
      const PipelineSpec p{P, 1, m, ScheduleKind::OneFOneB};
      ASSERT_EQ(check_pipeline(p), "");
      const auto sched = build_schedule(p);
      expect_complete(p, sched);
      const SimResult r = simulate(p, sched, 1, 2);
      ASSERT_FALSE(r.deadlock) << "P=" << P << " m=" << m;
      ASSERT_EQ(r.error, "") << "P=" << P << " m=" << m;
      // Textbook: (m + P - 1)(t_f + t_b) in total, (P - 1)(t_f + t_b) idle per stage.
      EXPECT_EQ(r.makespan, (m + P - 1) * 3) << "P=" << P << " m=" << m;
      for (int s = 0; s < P; s++) EXPECT_EQ(r.idle[s], (P - 1) * 3) << "P=" << P << " m=" << m << " stage " << s;
      EXPECT_LE(r.peak_in_flight, P) << "1F1B holds at most pp micro-batches";
      EXPECT_EQ(r.stage_peak_in_flight[0], std::min(P, m));
    }
}

TEST(Schedule, InterleavedIsCompleteDeadlockFreeWithItsBubble) {
  for (int P : {2, 4})
    for (int v : {2, 3})
      for (int m : {P, 2 * P, 4 * P}) {
        const PipelineSpec p{P, v, m, ScheduleKind::Interleaved};
        ASSERT_EQ(check_pipeline(p), "");
        const auto sched = build_schedule(p);
        expect_complete(p, sched);
        const SimResult r = simulate(p, sched, 1, 2);  // per chunk: 1/v of a stage's work
        ASSERT_FALSE(r.deadlock) << "P=" << P << " v=" << v << " m=" << m;
        ASSERT_EQ(r.error, "");
        // Megatron's interleaved 1F1B: the bubble shrinks v-fold, (P - 1)(t_f + t_b)/v
        // of a stage's own time, i.e. (P - 1) * 3 chunk units here.
        EXPECT_EQ(r.makespan, (long)m * v * 3 + (P - 1) * 3) << "P=" << P << " v=" << v << " m=" << m;
        for (int s = 0; s < P; s++) EXPECT_EQ(r.idle[s], (P - 1) * 3);
      }
}

TEST(Schedule, RejectsWhatItCannotRun) {
  EXPECT_NE(check_pipeline({2, 2, 3, ScheduleKind::Interleaved}), "");
  EXPECT_NE(check_pipeline({2, 2, 4, ScheduleKind::OneFOneB}), "");
}

TEST(Schedule, SimulatorCatchesABrokenSchedule) {
  const PipelineSpec p{2, 1, 2, ScheduleKind::OneFOneB};
  auto sched = build_schedule(p);
  // Stage 1 waits for an activation of a micro-batch stage 0 never sends.
  sched[1].insert(sched[1].begin(), {PipeOp::RecvAct, 5, 0});
  EXPECT_TRUE(simulate(p, sched).deadlock);
}
