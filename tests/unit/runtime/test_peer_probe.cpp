// The network probe (runtime/peer_probe.h) against a listening port and a
// silent one.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <nlohmann/json.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/peer_probe.h"

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

}  // namespace
}  // namespace trainer
