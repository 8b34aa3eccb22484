#include "node/stop_signal.h"

#include <signal.h>

namespace cuslice::node {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

}  // namespace

std::atomic<bool>& stop_on_signals() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return g_stop;
}

}  // namespace cuslice::node
