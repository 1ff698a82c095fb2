#include "runtime/peer_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <set>
#include <sstream>

#include "runtime/host_name.h"
#include "runtime/metrics.h"

namespace trainer {

namespace {

// IPv4 interfaces other than loopback; only_running: up with a carrier.
std::vector<PeerProbe::Address> interfaces(bool only_running) {
  std::vector<PeerProbe::Address> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
    if (!(i->ifa_flags & IFF_UP) || (only_running && !(i->ifa_flags & IFF_RUNNING))) continue;
    char ip[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, ip, sizeof ip);
    out.push_back({i->ifa_name, ip});
  }
  freeifaddrs(list);
  return out;
}

std::string json_ranks(const std::set<int>& s) {
  std::string t = "[";
  for (int r : s) t += (t.size() > 1 ? ", " : "") + std::to_string(r);
  return t + "]";
}

// One connection attempt in progress.
struct Attempt {
  std::string host;
  int fd = -1;
};

}  // namespace

PeerProbe::PeerProbe() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 256) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return;
  }
  port_ = ntohs(a.sin_port);
  mine_ = interfaces(false);
  // Accepted and closed at once, so many probes never fill the backlog.
  acceptor_ = std::thread([this] { accept_loop(); });
}

PeerProbe::~PeerProbe() {
  if (fd_ < 0) return;
  shutdown(fd_, SHUT_RDWR);  // wakes accept()
  if (acceptor_.joinable()) acceptor_.join();
  close(fd_);
}

void PeerProbe::accept_loop() {
  for (;;) {
    const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) close(c);
    else if (errno != EINTR && errno != ECONNABORTED) return;
  }
}

std::string PeerProbe::record() const {
  std::string r = std::to_string(port_) + " @" + host_name();
  for (const Address& a : mine_) r += " " + a.iface + "=" + a.ip;
  return r;
}

PeerProbe::Peer PeerProbe::parse(const std::string& record) {
  Peer p;
  std::istringstream in(record);
  in >> p.port;
  std::string w;
  while (in >> w)
    if (w[0] == '@') p.host = w.substr(1);
    else if (const size_t eq = w.find('='); eq != std::string::npos) p.addrs.push_back({w.substr(0, eq), w.substr(eq + 1)});
  return p;
}

void PeerProbe::set_peers(std::vector<std::string> records, int my_rank) {
  rank_ = my_rank;
  peers_.clear();
  for (const std::string& r : records) peers_.push_back(parse(r));
}

std::string PeerProbe::host(int rank) const {
  return rank >= 0 && (size_t)rank < peers_.size() ? peers_[rank].host : "";
}

std::string PeerProbe::host_of(int rank) const {
  std::vector<std::string> ips;
  for (const Address& a : peers_[rank].addrs) ips.push_back(a.ip);
  std::sort(ips.begin(), ips.end());
  std::string k;
  for (const std::string& ip : ips) k += ip + " ";
  return k;
}

bool PeerProbe::first_on_host() const {
  if (rank_ < 0 || (size_t)rank_ >= peers_.size()) return true;
  for (int r = 0; r < rank_; r++)
    if (host_of(r) == host_of(rank_)) return false;
  return true;
}

std::vector<std::string> PeerProbe::Result::unreached_hosts() const {
  std::set<std::string> names;
  for (int r : unreached) {
    const auto it = hosts.find(r);
    names.insert(it != hosts.end() && !it->second.empty() ? it->second : "rank " + std::to_string(r));
  }
  return {names.begin(), names.end()};
}

bool PeerProbe::Result::speaks_for_the_rest(int rank) const {
  if (unreached.empty() || !links_down.empty()) return false;
  std::set<int> side = here;
  side.insert(reached.begin(), reached.end());
  if (side.empty() || *side.begin() != rank) return false;
  if (side.size() != unreached.size()) return side.size() > unreached.size();
  return side.count(0) > 0;
}

PeerProbe::Result PeerProbe::probe(const std::vector<int>& ranks, double timeout_s) const {
  Result out;
  const std::vector<Address> running = interfaces(true);
  for (const Address& a : mine_) {
    const bool up = std::any_of(running.begin(), running.end(), [&](const Address& r) { return r.iface == a.iface; });
    if (!up) out.links_down.push_back(a.iface + " (" + a.ip + ")");
  }
  std::map<std::string, std::vector<int>> hosts;  // other hosts: the ranks of `ranks` on each
  const bool known = rank_ >= 0 && (size_t)rank_ < peers_.size();
  for (int r = 0; known && r < (int)peers_.size(); r++)
    if (host_of(r) == host_of(rank_)) out.here.insert(r);
  for (int r : ranks)
    if (known && r >= 0 && (size_t)r < peers_.size() && !out.here.count(r) && peers_[r].port > 0)
      hosts[host_of(r)].push_back(r);
  // Every address of every host at once; a host answers if any address does
  // (a refused connection is an answer: the host is there, the rank is not).
  std::vector<Attempt> pending;
  std::set<std::string> answered;
  for (const auto& [host, rs] : hosts)
    for (const Address& a : peers_[rs.front()].addrs) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons((uint16_t)peers_[rs.front()].port);
      if (inet_pton(AF_INET, a.ip.c_str(), &to.sin_addr) != 1) continue;
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (s < 0) continue;
      const int rc = connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to);
      if (rc == 0 || errno == ECONNREFUSED) answered.insert(host);
      if (rc != 0 && errno == EINPROGRESS) pending.push_back({host, s});
      else close(s);
    }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!pending.empty() && std::chrono::steady_clock::now() < end) {
    std::vector<pollfd> fds;
    for (const Attempt& p : pending) fds.push_back({p.fd, POLLOUT, 0});
    poll(fds.data(), fds.size(), 100);
    std::vector<Attempt> still;
    for (size_t i = 0; i < pending.size(); i++) {
      if (!fds[i].revents) {
        still.push_back(pending[i]);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(pending[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0 || err == ECONNREFUSED) answered.insert(pending[i].host);
      close(pending[i].fd);
    }
    pending.swap(still);
  }
  for (const Attempt& p : pending) close(p.fd);
  for (const auto& [host, rs] : hosts) {
    (answered.count(host) ? out.reached : out.unreached).insert(rs.begin(), rs.end());
    for (int r : rs) out.hosts[r] = peers_[r].host;
  }
  return out;
}

std::string PeerProbe::check(const std::vector<int>& ranks, double timeout_s) const {
  const Result res = probe(ranks, timeout_s);
  std::string down, names;
  for (const std::string& d : res.links_down) down += (down.empty() ? "\"" : ", \"") + json_escape(d) + "\"";
  for (const auto& [r, host] : res.hosts)
    if (!host.empty()) names += (names.empty() ? "\"" : ", \"") + std::to_string(r) + "\": \"" + json_escape(host) + "\"";
  return "\"network\": {\"links_down\": [" + down + "], \"reached\": " + json_ranks(res.reached) +
         ", \"unreached\": " + json_ranks(res.unreached) + ", \"host_ranks\": " + json_ranks(res.here) +
         ", \"hosts\": {" + names + "}}";
}

}  // namespace trainer
