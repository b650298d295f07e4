#include "monitor_args.h"

#include <deque>

#include "convert.h"
#include "errors.h"
#include "items.h"

namespace fg::addon {

void ReadNeighbourOptions(const Napi::Object& options, MonitorOptions* out) {
  const Napi::Value neighbours = options.Get("neighbours");
  if (neighbours.IsBoolean() && !neighbours.As<Napi::Boolean>().Value()) {
    out->neighbours = NeighbourScope::kNone;
  } else if (neighbours.IsString() && neighbours.As<Napi::String>().Utf8Value() == "ip") {
    out->neighbours = NeighbourScope::kIp;
  }
  const Napi::Value events = options.Get("neighbourEvents");
  out->neighbourEvents = events.IsString() && events.As<Napi::String>().Utf8Value() == "permanent"
                             ? NeighbourEvents::kPermanent
                             : NeighbourEvents::kAll;
}

std::optional<LinkFilter> LinkFilterFromJs(Napi::Env env, const Napi::Value& value) {
  if (value.IsNull()) return std::nullopt;
  if (!value.IsObject()) throw Napi::TypeError::New(env, "setFilter(filter | null)");
  LinkFilter filter;
  const Napi::Object options = value.As<Napi::Object>();
  const Napi::Value ifindexes = options.Get("ifindexes");
  const Napi::Value prefixes = options.Get("namePrefixes");
  if (!ifindexes.IsArray() || !prefixes.IsArray()) {
    throw Napi::TypeError::New(env, "setFilter({ ifindexes: number[], namePrefixes: string[] })");
  }
  const auto indexList = ifindexes.As<Napi::Array>();
  for (uint32_t i = 0; i < indexList.Length(); ++i) {
    filter.ifindexes.push_back(indexList.Get(i).ToNumber().Int32Value());
  }
  const auto prefixList = prefixes.As<Napi::Array>();
  for (uint32_t i = 0; i < prefixList.Length(); ++i) {
    filter.namePrefixes.push_back(prefixList.Get(i).ToString().Utf8Value());
  }
  return filter;
}

namespace {
// More than any fight policy lets through without delay.
constexpr int kMaxAllowance = 16;
constexpr double kMaxWindowMs = 86'400'000;
constexpr double kMaxClockMs = 1e12;  // 31 years of uptime

// { limit: 1..16, windowMs, recent: number[] (ms of the monotonic clock, at most 64) }
CorrectionAllowance AllowanceFromJs(Napi::Env env, const Napi::Value& value) {
  if (!value.IsObject())
    throw Napi::TypeError::New(env, "arm: allowance { limit, windowMs, recent }");
  const Napi::Object allowance = value.As<Napi::Object>();
  const double limit = allowance.Get("limit").ToNumber().DoubleValue();
  const double windowMs = allowance.Get("windowMs").ToNumber().DoubleValue();
  if (!(limit >= 1 && limit <= kMaxAllowance) || !(windowMs >= 0 && windowMs <= kMaxWindowMs)) {
    throw Napi::RangeError::New(env, "arm: allowance.limit must be 1.." +
                                         std::to_string(kMaxAllowance) + ", windowMs 0..1 day");
  }
  std::deque<int64_t> recent;
  if (const Napi::Value list = allowance.Get("recent"); list.IsArray()) {
    const auto array = list.As<Napi::Array>();
    if (array.Length() > 4 * kMaxAllowance)
      throw Napi::RangeError::New(env, "arm: allowance.recent too long");
    for (uint32_t i = 0; i < array.Length(); ++i) {
      const double at = array.Get(i).ToNumber().DoubleValue();
      // The monotonic clock in ms: finite, and well inside int64 nanoseconds.
      if (!(at >= 0 && at <= kMaxClockMs)) {
        throw Napi::RangeError::New(env,
                                    "arm: allowance.recent holds times of the monotonic clock");
      }
      recent.push_back(static_cast<int64_t>(at * 1e6));
    }
  }
  return CorrectionAllowance(static_cast<int>(limit), static_cast<int64_t>(windowMs * 1e6),
                             std::move(recent));
}
}  // namespace

ArmRequest ArmFromJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || !info[1].IsObject()) {
    throw Napi::TypeError::New(env, "arm(ifindex, { name, mac, allowance? })");
  }
  ArmRequest request;
  request.ifindex = info[0].As<Napi::Number>().Int32Value();
  const Napi::Object target = info[1].As<Napi::Object>();
  request.correction.name = target.Get("name").ToString().Utf8Value();
  request.correction.mac = MacFromJs(target.Get("mac"), "mac");
  if (const Napi::Value allowance = target.Get("allowance"); !allowance.IsUndefined()) {
    request.correction.allowance = AllowanceFromJs(env, allowance);
  }
  return request;
}

void ArmCore(Napi::Env env, MonitorCore& core, ArmRequest request, const std::string& netnsLabel) {
  Result<Unit> armed = core.Arm(request.ifindex, std::move(request.correction));
  if (!armed.ok()) ThrowSysError(env, armed.error(), netnsLabel);
}

KeepRequest KeepFromJs(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "keep(ifindex, recovered?)");
  KeepRequest request;
  request.ifindex = info[0].As<Napi::Number>().Int32Value();
  if (!info[1].IsUndefined()) request.recovered = NeighbourEntriesFromJs(info[1]);
  return request;
}

napi_value RestoreSetToJs(JsWriter& js, const MonitorCore& core, int32_t ifindex) {
  std::vector<netlink::NeighRecord> records;
  if (const RestoreSet* set = core.RestoreSetOf(ifindex)) {
    for (const netlink::NeighbourEntry& entry : set->entries()) records.push_back(RecordOf(entry));
  }
  std::vector<const netlink::NeighRecord*> pointers;
  for (const netlink::NeighRecord& record : records) pointers.push_back(&record);
  return NeighbourColumnsToJs(js, pointers);
}

Napi::Object StatsToJs(Napi::Env env, const MonitorStats& stats, const ReportStats& reports,
                       int receiveBuffer, const StateMirror& mirror) {
  Napi::Object object = Napi::Object::New(env);
  const auto set = [&](const char* key, uint64_t value) {
    object.Set(key, Napi::Number::New(env, static_cast<double>(value)));
  };
  set("wakeups", stats.wakeups);
  set("datagrams", stats.datagrams);
  set("messages", stats.messages);
  set("overruns", stats.overruns);
  set("resyncs", stats.resyncs);
  set("dumpRetries", stats.dumpRetries);
  set("inconsistentDumps", stats.inconsistentDumps);
  set("foreignSenderDrops", stats.foreignSenderDrops);
  set("truncatedDrops", stats.truncatedDrops);
  set("malformed", stats.malformed);
  set("staleReplies", stats.staleReplies);
  set("correctionEchoes", stats.correctionEchoes);
  set("foldedEchoes", stats.foldedEchoes);
  set("staleRecords", stats.staleRecords);
  set("currentRecords", stats.currentRecords);
  set("fdbRemoteResyncs", stats.fdbRemoteResyncs);
  set("carriedCorrections", stats.carriedCorrections);
  set("reports", reports.reports);
  set("heldCorrections", reports.heldCorrections);
  object.Set("receiveBuffer", receiveBuffer);
  set("links", mirror.linkCount());
  set("neighbours", mirror.neighCount());
  return object;
}

}  // namespace fg::addon
