// kilnd: the Kiln daemon. Parses flags (and its config file), claims the
// socket (or takes the one a service manager passed), serves the
// kiln.v1.Kiln and grpc.health.v1.Health services (and /metrics with
// --metrics-port) until SIGTERM/SIGINT or --idle-exit-min minutes unused,
// then refuses new calls, drains in-flight ones and removes its socket and
// lock.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cache/compiler_version.h"
#include "runtime/exec/arenas.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/profile.h"
#include "server/cache_archive_command.h"
#include "server/daemon_config.h"
#include "server/json_log_formatter.h"
#include "server/kiln_service.h"
#include "server/metrics_http.h"
#include "server/metrics_text.h"
#include "server/peer_listener.h"
#include "server/shm_region.h"
#include "server/socket_lock.h"
#include "server/text_log_formatter.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr int kMaxMessageBytes = 256 << 20;

int Run(int argc, char** argv) {
  using namespace kiln::server;
  if (argc > 1 && IsCacheArchiveCommand(argv[1])) return RunCacheArchiveCommand(argc, argv);
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
    std::printf("kilnd %s\n", kiln::cache::CompilerVersion());
    return 0;
  }
  // Logs go to stderr (stdout stays free for --help/--version) or a file;
  // JSON lines carry no colour codes.
  const bool json_logs = config->log_format == "json";
  if (!config->log_file.empty()) {
    spdlog::set_default_logger(spdlog::basic_logger_mt("kilnd", config->log_file));
  } else if (json_logs) {
    spdlog::set_default_logger(spdlog::stderr_logger_mt("kilnd"));
  } else {
    spdlog::set_default_logger(spdlog::stderr_color_mt("kilnd"));
  }
  spdlog::flush_on(spdlog::level::info);
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  if (json_logs) {
    spdlog::set_formatter(std::make_unique<JsonLogFormatter>());
  } else {
    spdlog::set_formatter(MakeTextLogFormatter());
  }
  if (!config->config_file.empty()) spdlog::info("settings from {}", config->config_file);

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

  std::string tcp_token;
  if (!config->tcp_address.empty()) {
    auto token = ReadTokenFile(config->token_file);
    if (!token.ok()) {
      spdlog::error("{}", std::string(token.status().message()));
      return 2;
    }
    tcp_token = *std::move(token);
  }
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials = grpc::InsecureServerCredentials();
  if (!config->tls_cert.empty()) {
    auto read = [](const std::string& path) -> std::optional<std::string> {
      std::ifstream in(path);
      if (!in) return std::nullopt;
      std::stringstream text;
      text << in.rdbuf();
      return text.str();
    };
    auto cert = read(config->tls_cert), key = read(config->tls_key);
    if (!cert || !key) {
      spdlog::error("cannot read {}", !cert ? config->tls_cert : config->tls_key);
      return 2;
    }
    grpc::SslServerCredentialsOptions tls;
    tls.pem_key_cert_pairs.push_back({*key, *cert});
    tcp_credentials = grpc::SslServerCredentials(tls);
  }

  // A listening socket passed by a service manager (systemd socket
  // activation) is used as is: the manager owns its path.
  std::optional<SocketLock> lock;
  std::unique_ptr<PeerListener> listener;
  if (std::optional<int> inherited = InheritedListenSocket()) {
    auto adopted = PeerListener::Adopt(*inherited);
    if (!adopted.ok()) {
      spdlog::error("{}", std::string(adopted.status().message()));
      return 1;
    }
    listener = *std::move(adopted);
    spdlog::info("using the listening socket passed by the service manager (fd {})", *inherited);
  } else {
    auto acquired = SocketLock::Acquire(config->socket_path);
    if (!acquired.ok()) {
      spdlog::error("{}", std::string(acquired.status().message()));
      return acquired.status().code() == absl::StatusCode::kAlreadyExists ? 3 : 1;
    }
    lock.emplace(*std::move(acquired));
    auto bound = PeerListener::Bind(config->socket_path);
    if (!bound.ok()) {
      spdlog::error("{}", std::string(bound.status().message()));
      return 1;
    }
    listener = *std::move(bound);
  }
  // Leftovers of clients that died before handing their regions over.
  if (int n = RemoveStaleRegions("/dev/shm", /*min_age_s=*/10); n > 0) {
    spdlog::info("removed {} shared-memory objects left by exited clients", n);
  }
  kiln::runtime::ConfigureThreads(config->threads);
  kiln::runtime::SetKeepWarm(config->spin_us);

  std::unique_ptr<kiln::cache::RedisStore> remote;
  if (!config->remote_cache.url.empty()) {
    auto created = kiln::cache::RedisStore::Create(config->remote_cache);
    if (!created.ok()) {
      spdlog::error("{}", std::string(created.status().message()));
      return 2;
    }
    remote = *std::move(created);
    if (config->cache_dir.empty()) {
      spdlog::warn("--remote-cache {} with --no-cache: the remote tier sits behind the cache "
                   "directory and is not used without one", remote->display_url());
    }
  }
  KilnService service(config->cache_dir, /*execution_threads=*/0, config->cache_max_mb << 20,
                      absl::Seconds(config->constant_grace_s), std::move(remote));
  service.SetAccess(listener.get(), tcp_token);
  service.SetClientLimits(config->limits);
  service.SetDaemonLimits(config->daemon_limits);
  if (!config->test_call_gate.empty()) {
    spdlog::warn("--test-call-gate {}: every run waits for the test's go-ahead",
                 config->test_call_gate);
    service.SetTestCallGate(std::make_unique<TestCallGate>(config->test_call_gate));
  }
  // Before the gRPC server: a port that is taken fails the start cleanly.
  std::unique_ptr<MetricsHttpServer> metrics;
  if (config->metrics_port != 0) {
    auto started = MetricsHttpServer::Start(
        config->metrics_port, [&service] { return RenderMetrics(service.CollectMetrics()); });
    if (!started.ok()) {
      spdlog::error("{}", std::string(started.status().message()));
      if (lock) lock->Release();
      return 1;
    }
    metrics = *std::move(started);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // The unix socket's connections come from the listener, which checks
  // each peer's credentials before handing it to gRPC.
  const std::string unix_target = "unix:" + config->socket_path;
  if (!config->tcp_address.empty()) {
    builder.AddListeningPort(config->tcp_address, tcp_credentials);
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    spdlog::error("cannot start the gRPC server{}",
                  config->tcp_address.empty() ? "" : " (listening on " + config->tcp_address + ")");
    return 1;
  }
  listener->Start(server.get());
  std::string extras;
  if (metrics) {
    absl::StrAppend(&extras, "; metrics on http://127.0.0.1:", metrics->port(), "/metrics");
  }
  if (config->idle_exit_min > 0) {
    absl::StrAppend(&extras, "; exits after ", config->idle_exit_min, " min unused");
  }
  spdlog::info("kilnd {} ready on {}{} ({} threads, cache {}{})", kiln::cache::CompilerVersion(), unix_target,
               config->tcp_address.empty() ? ""
               : config->tls_cert.empty()  ? " and " + config->tcp_address + " (token)"
                                           : " and " + config->tcp_address + " (TLS, token)",
               kiln::runtime::ConfiguredThreads(),
               config->cache_dir.empty() ? "off"
               : config->cache_max_mb == 0
                   ? config->cache_dir + ", no size cap"
                   : absl::StrCat(config->cache_dir, ", cap ", config->cache_max_mb, " MiB"),
               extras);

  // Wait for a signal; with --idle-exit-min, also look now and then whether
  // the daemon has gone unused long enough.
  const absl::Duration idle_limit = absl::Seconds(config->idle_exit_min * 60);
  for (;;) {
    if (idle_limit <= absl::ZeroDuration()) {
      int sig = 0;
      sigwait(&signals, &sig);
      spdlog::info("signal {}: draining in-flight calls and shutting down", sig);
      break;
    }
    // A fraction of the limit (a test's few seconds), at most a second.
    const absl::Duration poll =
        std::clamp(idle_limit / 10, absl::Milliseconds(10), absl::Seconds(1));
    const timespec wait = absl::ToTimespec(poll);
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig > 0) {
      spdlog::info("signal {}: draining in-flight calls and shutting down", sig);
      break;
    }
    if (service.BeginIdleShutdown(idle_limit)) {
      spdlog::info("no client session or call for {} (--idle-exit-min {}): shutting down",
                   absl::FormatDuration(idle_limit), config->idle_exit_min);
      break;
    }
  }
  if (metrics) metrics->Stop();
  listener->Stop();     // no new connections
  service.Shutdown();  // new calls: UNAVAILABLE; call channels stop after their call
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
  server->Wait();
  if (lock) lock->Release();
  if (kiln::runtime::ProfilingEnabled()) {
    // One record per line: a record's newlines are escaped (text_log_formatter.h).
    spdlog::info("execution profile (KILN_PROFILE):");
    for (absl::string_view line : absl::StrSplit(kiln::runtime::ProfileReport(), '\n')) {
      if (!line.empty()) spdlog::info("  {}", std::string(line));
    }
  }
  spdlog::info("kilnd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
