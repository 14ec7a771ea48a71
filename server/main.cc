// kilnd: the Kiln daemon. Parses flags, claims the socket, serves the
// kiln.v1.Kiln and grpc.health.v1.Health services until SIGTERM/SIGINT, then
// drains in-flight calls and removes its socket and lock.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "runtime/exec/arenas.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/profile.h"
#include "server/daemon_config.h"
#include "server/kiln_service.h"
#include "server/socket_lock.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr int kMaxMessageBytes = 256 << 20;

int Run(int argc, char** argv) {
  using namespace kiln::server;
  auto config = ParseFlags(argc, argv);
  if (!config.ok()) {
    std::fprintf(stderr, "kilnd: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (config->help) {
    std::fputs(HelpText().c_str(), stdout);
    return 0;
  }
  if (config->version) {
    std::printf("kilnd %s\n", KILN_RUNTIME_VERSION);
    return 0;
  }
  // Logs go to stderr (stdout stays free for --help/--version) or a file.
  if (!config->log_file.empty()) {
    spdlog::set_default_logger(spdlog::basic_logger_mt("kilnd", config->log_file));
  } else {
    spdlog::set_default_logger(spdlog::stderr_color_mt("kilnd"));
  }
  spdlog::flush_on(spdlog::level::info);
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [kilnd %P] %^%l%$ %v");

  // Block the shutdown signals in every thread; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Past a file-size limit (RLIMIT_FSIZE) a write raises SIGXFSZ, which
  // kills by default. Ignored, the write fails with EFBIG instead, and a
  // full or size-limited cache turns caching off rather than killing the
  // daemon.
  signal(SIGXFSZ, SIG_IGN);

  auto lock = SocketLock::Acquire(config->socket_path);
  if (!lock.ok()) {
    spdlog::error("{}", std::string(lock.status().message()));
    return lock.status().code() == absl::StatusCode::kAlreadyExists ? 3 : 1;
  }
  kiln::runtime::ConfigureThreads(config->threads);
  kiln::runtime::SetKeepWarm(config->spin_us);

  KilnService service(config->cache_dir, /*execution_threads=*/0, config->cache_max_mb << 20,
                      absl::Seconds(config->constant_grace_s));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  const std::string unix_target = "unix:" + config->socket_path;
  builder.AddListeningPort(unix_target, grpc::InsecureServerCredentials());
  if (!config->tcp_address.empty()) {
    builder.AddListeningPort(config->tcp_address, grpc::InsecureServerCredentials());
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    spdlog::error("cannot listen on {}{}", unix_target,
                  config->tcp_address.empty() ? "" : " or " + config->tcp_address);
    return 1;
  }
  chmod(config->socket_path.c_str(), 0600);
  spdlog::info("kilnd {} ready on {}{} ({} threads, cache {})", KILN_RUNTIME_VERSION, unix_target,
               config->tcp_address.empty() ? "" : " and " + config->tcp_address,
               kiln::runtime::ConfiguredThreads(),
               config->cache_dir.empty() ? "off"
               : config->cache_max_mb == 0
                   ? config->cache_dir + ", no size cap"
                   : absl::StrCat(config->cache_dir, ", cap ", config->cache_max_mb, " MiB"));

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining in-flight calls and shutting down", sig);
  service.Shutdown();  // call channels first: their calls are in flight too
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
  server->Wait();
  lock->Release();
  if (kiln::runtime::ProfilingEnabled()) {
    spdlog::info("execution profile (KILN_PROFILE):\n{}", kiln::runtime::ProfileReport());
  }
  spdlog::info("kilnd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
