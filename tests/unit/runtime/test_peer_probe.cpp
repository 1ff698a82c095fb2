// The network probe (runtime/peer_probe.h) against a listening port and a
// silent one; the watch that probes again and again (runtime/peer_watch.h);
// which rank speaks when hosts are cut off.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <nlohmann/json.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/peer_probe.h"
#include "runtime/peer_watch.h"

namespace trainer {
namespace {

// A local port that answers no one: a listener that never accepts, its
// queue filled (Linux then drops new connection requests unanswered).
int silent_port(std::vector<int>& fds) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = inet_addr("127.0.0.2");
  socklen_t len = sizeof a;
  bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(l, 0);
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  fds.push_back(l);
  for (int i = 0; i < 3; i++) {
    const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fds.push_back(c);
  }
  usleep(100000);
  return ntohs(a.sin_port);
}

TEST(PeerProbe, ReachesAListeningHostNotASilentOne) {
  // Rank 1 listens on 127.0.0.1 (another probe's port); rank 2's address
  // answers nothing; rank 3 shares rank 0's host.
  PeerProbe a, b;
  std::vector<int> fds;
  const std::string port = b.record().substr(0, b.record().find(' '));
  a.set_peers({a.record(), port + " @nodeB lo=127.0.0.1", std::to_string(silent_port(fds)) + " @nodeC lo=127.0.0.2",
               a.record()},
              0);
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::json j = nlohmann::json::parse("{" + a.check({1, 2, 3}, 1.0) + "}").at("network");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(j.at("reached"), nlohmann::json::array({1})) << j;
  EXPECT_EQ(j.at("unreached"), nlohmann::json::array({2})) << j;
  EXPECT_EQ(j.at("host_ranks"), nlohmann::json::array({0, 3})) << j;
  EXPECT_TRUE(j.at("links_down").empty()) << j;
  // The probed ranks' host names, from their lines (what names a host that wrote no dump).
  EXPECT_EQ(j.at("hosts"), nlohmann::json({{"1", "nodeB"}, {"2", "nodeC"}})) << j;
  EXPECT_LT(took, 3.0);  // the 1 s probe timeout, not the kernel's SYN retries (3 s, 7 s, ...)
  for (int fd : fds) close(fd);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Rank 0 (`a`) with rank 1 on a listening host (`b`) and rank 2 on a silent one.
struct TwoHosts {
  PeerProbe a, b;
  std::vector<int> fds;
  TwoHosts() {
    const std::string port = b.record().substr(0, b.record().find(' '));
    a.set_peers({a.record(), port + " @nodeB lo=127.0.0.1", std::to_string(silent_port(fds)) + " @nodeC lo=127.0.0.2"},
                0);
  }
  ~TwoHosts() {
    for (int fd : fds) close(fd);
  }
};

TEST(PeerWatch, AHostThatAnswersNeverEndsIt) {
  // However long the work takes: here six periods.
  TwoHosts h;
  std::atomic<int> cuts{0};
  auto t0 = std::chrono::steady_clock::now();
  {
    PeerWatch w(h.a, {1}, 0.2, [&](const PeerProbe::Result&) { cuts++; }, 0.5);
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    t0 = std::chrono::steady_clock::now();
  }
  EXPECT_EQ(cuts.load(), 0);
  EXPECT_LT(seconds_since(t0), 0.6);  // stopped at once (or after the probe under way)
}

TEST(PeerWatch, AHostThatStopsAnsweringIsNamedOnce) {
  TwoHosts h;
  std::mutex m;
  std::vector<PeerProbe::Result> cuts;
  const auto t0 = std::chrono::steady_clock::now();
  {
    PeerWatch w(h.a, {1, 2}, 0.2, [&](const PeerProbe::Result& r) {
      std::lock_guard<std::mutex> l(m);
      cuts.push_back(r);
    }, 0.5);
    while (seconds_since(t0) < 4) {
      {
        std::lock_guard<std::mutex> l(m);
        if (!cuts.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // no second call
  }
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_EQ(cuts[0].unreached, std::set<int>{2});
  EXPECT_EQ(cuts[0].reached, std::set<int>{1});
  EXPECT_EQ(cuts[0].unreached_hosts(), std::vector<std::string>{"nodeC"});
  EXPECT_TRUE(cuts[0].speaks_for_the_rest(0));
}

TEST(PeerWatch, StopsBeforeItsFirstProbe) {
  TwoHosts h;
  bool cut = false;
  const auto t0 = std::chrono::steady_clock::now();
  { PeerWatch w(h.a, {2}, 60, [&](const PeerProbe::Result&) { cut = true; }); }
  EXPECT_LT(seconds_since(t0), 0.2);
  EXPECT_FALSE(cut);
}

TEST(PeerProbe, OneRankOfTheHostsStillInTouchSpeaks) {
  auto result = [](std::set<int> here, std::set<int> reached, std::set<int> unreached, bool link_down = false) {
    PeerProbe::Result r;
    r.here = std::move(here), r.reached = std::move(reached), r.unreached = std::move(unreached);
    if (link_down) r.links_down = {"eth0 (10.0.0.3)"};
    return r;
  };
  // Three hosts, one rank each; host 2 cut.
  EXPECT_TRUE(result({0}, {1}, {2}).speaks_for_the_rest(0));
  EXPECT_FALSE(result({1}, {0}, {2}).speaks_for_the_rest(1));  // not the lowest of its side
  EXPECT_FALSE(result({2}, {}, {0, 1}, true).speaks_for_the_rest(2));  // its own link is down
  EXPECT_FALSE(result({2}, {}, {0, 1}).speaks_for_the_rest(2));        // the smaller side
  // Rank 0's host cut: the lowest rank still in touch speaks.
  EXPECT_TRUE(result({1}, {2}, {0}).speaks_for_the_rest(1));
  // Two hosts that lost each other: the side with rank 0.
  EXPECT_TRUE(result({0}, {}, {1}).speaks_for_the_rest(0));
  EXPECT_FALSE(result({1}, {}, {0}).speaks_for_the_rest(1));
  // Nothing unreached: nothing to say.
  EXPECT_FALSE(result({0}, {1, 2}, {}).speaks_for_the_rest(0));
}

}  // namespace
}  // namespace trainer
