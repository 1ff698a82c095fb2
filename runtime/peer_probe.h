#pragma once
// Which host lost its network, when every rank waits in the same collective
// and the flight recorders alone cannot tell (the ranks look alike: each is
// inside the call, none is behind). At start-up each rank listens on a TCP
// port of its own, outside the communication library, and the ranks swap
// their addresses (interface and IPv4 address, port). When the watchdog
// fires it probes the hosts of the ranks it waits for (a connection attempt
// each, all at once, a couple of seconds at most) and checks its own
// interfaces: an interface that was up at start-up and is down now, or
// hosts that no longer answer, go into the flight recorder's dump, and
// `trainer diagnose` names the ranks on the host that was cut off.
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace trainer {

class PeerProbe {
 public:
  // Opens the listening socket (no socket: probes find nothing to say).
  PeerProbe();
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // This rank's line for the swap: "PORT @HOST IFACE=IP IFACE=IP ..." (its
  // host name, then up, non-loopback IPv4 interfaces).
  std::string record() const;
  // Every rank's line, by world rank.
  void set_peers(std::vector<std::string> records, int my_rank);
  // The host name `rank` gave in the swap ("" for a rank outside it).
  std::string host(int rank) const;

  // Whether this rank is the lowest of the ranks on its host (by address).
  bool first_on_host() const;

  // What one probe found.
  struct Result {
    std::vector<std::string> links_down;  // "IFACE (IP)": up at start-up, down now
    std::set<int> reached, unreached;     // the probed ranks, by whether their host answered
    std::set<int> here;                   // the ranks on this rank's host
    std::map<int, std::string> hosts;     // probed rank -> the host name it gave
    // The host names of `unreached`, sorted, each once.
    std::vector<std::string> unreached_hosts() const;
    // Whether `rank` (one of `here`) speaks for the hosts still in touch
    // when some are not: no link of its own down, its side (here and
    // reached) larger than the unreached one (on a tie, the side with rank
    // 0), and the lowest rank on it. One rank in a job says it; never one
    // on the host that was cut off, which would name the others.
    bool speaks_for_the_rest(int rank) const;
  };
  // Probes the hosts of `ranks` (one rank per host; ranks with this rank's
  // addresses share its host and are skipped) for at most timeout_s, and
  // checks this rank's own interfaces. Thread-safe once the peers are set.
  Result probe(const std::vector<int>& ranks, double timeout_s) const;
  // probe() as the dump's member: "network": {"links_down": [...],
  // "reached": [ranks], "unreached": [ranks], "host_ranks": [ranks on this
  // host], "hosts": {"RANK": "HOST", ...} (the probed ranks' host names, so
  // that a host that could not write its own dumps can still be named)}.
  std::string check(const std::vector<int>& ranks, double timeout_s) const;

  struct Address {
    std::string iface, ip;
  };

 private:
  struct Peer {
    int port = 0;
    std::string host;  // its host name ("" from a line without one)
    std::vector<Address> addrs;
  };
  static Peer parse(const std::string& record);
  // The host a rank is on, as its sorted addresses.
  std::string host_of(int rank) const;
  void accept_loop();
  int fd_ = -1, port_ = 0, rank_ = -1;
  std::thread acceptor_;
  std::vector<Address> mine_;
  std::vector<Peer> peers_;
};

}  // namespace trainer
