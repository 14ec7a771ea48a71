// TestCallGate: for tests only (kilnd --test-call-gate FIFO, off by
// default). Every run (Execute RPC or call channel) waits at the gate before
// it starts, so a test can act while a call is known to be inside the
// daemon - stop the daemon, kill it, send SIGTERM - or make sure a reply
// cannot come before the client has looked for it, without sleeps, timers
// or SIGSTOP.
//
// The gate is a named pipe the test created. Pass() opens it for reading,
// which blocks until the test opens it for writing, and then reads one byte,
// which blocks until the test writes one (or closes its end). So the test's
// non-blocking open for writing succeeds exactly when a run is held at the
// gate, and its one byte lets that run go.
//
// Only the daemon's command line turns it on (not the config file, not a
// client). Thread-safe: concurrent runs queue at the pipe, each taking one
// byte.
#pragma once

#include <string>

namespace kiln::server {

class TestCallGate {
 public:
  explicit TestCallGate(std::string fifo_path) : path_(std::move(fifo_path)) {}

  // Returns once the test lets this run go, or at once (logging why) when
  // the pipe cannot be opened or read: a broken gate must not hang a daemon.
  void Pass() const;

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
};

}  // namespace kiln::server
