// KilnService: the execution path. Execute validates on gRPC's callback
// thread and runs on the work queue (or in place, for a short run); a call
// channel's call runs on the channel's thread. Both go through
// prepared_run.h, so a call is checked the same whichever way it came.
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/exec/executor.h"
#include "runtime/util/status_macros.h"
#include "server/call_channel_layout.h"
#include "server/kiln_service.h"
#include "server/prepared_run.h"
#include "server/request_guard.h"
#include "server/status_map.h"

namespace kiln::server {

void KilnService::CountExecute(std::chrono::steady_clock::time_point start, bool ok) {
  execute_seconds_.Observe(std::chrono::steady_clock::now() - start);
  executes_++;
  if (!ok) execute_errors_++;
}

absl::Status KilnService::RunGated(const PreparedRun& run) {
  input_bytes_ += run.input_bytes;
  input_bytes_in_place_ += run.input_bytes_in_place;
  if (call_gate_ != nullptr) call_gate_->Pass();
  return RunPrepared(run);
}

absl::Status KilnService::RunChannelCall(const Session& session, const ChannelCall& call) {
  IdleTracker::Call in_flight = idle_.Begin();
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = Guarded("running a call", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(PreparedRun run,
                          PrepareRun(session, call.handle, call.inputs, call.outputs));
    run.keep_warm = (call.flags & kRequestFlagClientComputesNext) == 0;
    ExecutionSlots::Slot slot(&channel_slots_);
    return RunGated(run);
  });
  channel_calls_++;
  CountExecute(start, s.ok());
  return s;
}

absl::Status KilnService::DoOpenChannel(const kiln::v1::OpenChannelRequest& req,
                                        kiln::v1::OpenChannelResponse* resp) {
  if (shutting_down_.load()) return absl::UnavailableError("kilnd is shutting down");
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  KILN_ASSIGN_OR_RETURN(auto block, session->Region(req.region_id()));
  // Serialized, so concurrent opens cannot pass the daemon-wide cap
  // together (channels only ever close without it).
  absl::MutexLock lock(&channel_open_mu_);
  if (const size_t open = sessions_.channel_count(); open >= daemon_limits_.max_channels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon has ", open, " call channels open, its cap (kilnd --max-channels); "
        "the client can use the Execute RPC instead"));
  }
  // The session owns the channel and stops it before it goes away, so the
  // runner may hold a plain pointer to it.
  const Session* s = session.get();
  KILN_ASSIGN_OR_RETURN(
      auto channel, CallChannel::Start(std::move(block), [this, s](const ChannelCall& call) {
        return RunChannelCall(*s, call);
      }));
  resp->set_max_tensors(channel->slots());
  resp->set_layout_version(kChannelLayoutVersion);
  KILN_ASSIGN_OR_RETURN(uint64_t id, session->AddChannel(std::move(channel)));
  resp->set_channel_id(id);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KilnService::OpenChannel(grpc::CallbackServerContext* ctx,
                                                   const kiln::v1::OpenChannelRequest* req,
                                                   kiln::v1::OpenChannelResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("opening a call channel", [&] { return DoOpenChannel(*req, resp); }));
}

grpc::ServerUnaryReactor* KilnService::CloseChannel(grpc::CallbackServerContext* ctx,
                                                    const kiln::v1::CloseChannelRequest* req,
                                                    kiln::v1::CloseChannelResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("closing a call channel", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    return session->RemoveChannel(req->channel_id());
  }));
}

grpc::ServerUnaryReactor* KilnService::Execute(grpc::CallbackServerContext* ctx,
                                               const kiln::v1::ExecuteRequest* req,
                                               kiln::v1::ExecuteResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<PreparedRun> run;
  if (absl::Status s = Guarded("preparing a run", [&]() -> absl::Status {
        KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
        run = PrepareExecuteRequest(*session, *req);
        return run.status();
      });
      !s.ok()) {
    CountExecute(start, false);
    return FinishUnary(ctx, s);
  }
  // The call stays open (req, resp and ctx alive) until Finish.
  auto* reactor = ctx->DefaultReactor();
  const bool short_run = runtime::RunsShort(*run->graph);
  auto execute = [this, reactor, resp, start, in_flight = std::move(in_flight),
                  run = *std::move(run)]() mutable {
    absl::Status s = RunGated(run);
    resp->set_run_us(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - run.start)
            .count());
    CountExecute(start, s.ok());
    run = PreparedRun();  // let go of the regions before the client hears back
    reactor->Finish(ToGrpcStatus(s));
  };
  // A run known to be short holds this thread no longer than the call's
  // own handling does, and skips a thread hand-off, which for a tiny model
  // is a visible share of the daemon's CPU per call.
  if (short_run) {
    execute();
  } else if (absl::Status queued = Guarded("queueing a run", [&] {
               executions_.Submit(std::move(execute));
               return absl::OkStatus();
             });
             !queued.ok()) {
    CountExecute(start, false);
    reactor->Finish(ToGrpcStatus(queued));
  }
  return reactor;
}

}  // namespace kiln::server
