// The JS arguments of the monitor classes (Monitor, ScriptedMonitor) as native
// values, and the monitor's state as JS reads it: one reading for both, so that
// a scripted monitor takes exactly what the real one takes.
#pragma once

#include <napi.h>

#include <optional>
#include <string>

#include "js_writer.h"
#include "monitor_core.h"
#include "report_queue.h"

namespace fg::addon {

// options.neighbours (true, the default; false; "ip": ARP and NDP, no FDB) and
// options.neighbourEvents ("all", the default; "permanent") into `out`.
void ReadNeighbourOptions(const Napi::Object& options, MonitorOptions* out);

// { ifindexes: number[], namePrefixes: string[] } or null; a TypeError otherwise.
std::optional<LinkFilter> LinkFilterFromJs(Napi::Env env, const Napi::Value& value);

// arm(ifindex, { name, mac: Buffer(6), allowance?: { limit, windowMs, recent } }): corrections
// are made while `allowance` lets them through (without one: one, then the arming is spent).
struct ArmRequest {
  int32_t ifindex = 0;
  ArmedCorrection correction;
};
ArmRequest ArmFromJs(const Napi::CallbackInfo& info);
// Arms `core` as asked (the caller holds whatever guards the core); throws as JS expects.
void ArmCore(Napi::Env env, MonitorCore& core, ArmRequest request, const std::string& netnsLabel);

// keep(ifindex, recovered?: entries as columns): see MonitorCore::Keep.
struct KeepRequest {
  int32_t ifindex = 0;
  std::vector<netlink::NeighbourEntry> recovered;
};
KeepRequest KeepFromJs(const Napi::CallbackInfo& info);
// The device's restore set as neighbour columns (empty when none is kept).
napi_value RestoreSetToJs(JsWriter& js, const MonitorCore& core, int32_t ifindex);

Napi::Object StatsToJs(Napi::Env env, const MonitorStats& stats, const ReportStats& reports,
                       int receiveBuffer, const StateMirror& mirror);

}  // namespace fg::addon
