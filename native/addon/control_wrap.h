// JS class `Control`: a request socket in one network namespace for writes,
// lookups and SIOCETHTOOL. Every method runs synchronously, or on the libuv
// thread pool when its last argument is `true` (then it returns a Promise).
#pragma once

#include <napi.h>

#include <memory>
#include <mutex>
#include <string>

#include "netlink_socket.h"
#include "snmp_counters.h"

namespace fg::addon {

class ControlWrap : public Napi::ObjectWrap<ControlWrap> {
 public:
  static Napi::Function Define(Napi::Env env);

  explicit ControlWrap(const Napi::CallbackInfo& info);

  // Shared with thread-pool jobs, so a close() never pulls the socket from
  // under a running request.
  struct Core {
    std::mutex mutex;
    std::optional<NetlinkRequester> requester;
    NetnsTarget target;
    std::optional<SnmpFiles> snmp;  // opened on the first readChecksumErrors()
  };

 private:
  Napi::Value DumpLinks(const Napi::CallbackInfo& info);
  Napi::Value DumpNeighbours(const Napi::CallbackInfo& info);
  Napi::Value GetLink(const Napi::CallbackInfo& info);
  Napi::Value GetLinkByName(const Napi::CallbackInfo& info);
  Napi::Value SetLinkAddress(const Napi::CallbackInfo& info);
  Napi::Value ReplaceNeighbour(const Napi::CallbackInfo& info);
  Napi::Value DeleteNeighbour(const Napi::CallbackInfo& info);
  using NeighbourRequestMethod = Result<Unit> (NetlinkRequester::*)(const netlink::NeighbourEntry&);
  Napi::Value NeighbourRequest(const Napi::CallbackInfo& info, NeighbourRequestMethod request);
  Napi::Value ReplaceNeighbours(const Napi::CallbackInfo& info);
  Napi::Value ProbeWriteAccess(const Napi::CallbackInfo& info);
  Napi::Value GetFeatures(const Napi::CallbackInfo& info);
  Napi::Value SetFeatures(const Napi::CallbackInfo& info);
  Napi::Value GetDriverInfo(const Napi::CallbackInfo& info);
  Napi::Value ReadAddrAssignType(const Napi::CallbackInfo& info);
  Napi::Value ReadChecksumErrors(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value NetnsInodeGetter(const Napi::CallbackInfo& info);
  Napi::Value OwnNetnsGetter(const Napi::CallbackInfo& info);
  Napi::Value NetnsCookieGetter(const Napi::CallbackInfo& info);

  std::shared_ptr<Core> core_;
  std::string netnsLabel_;
  uint64_t netnsInode_ = 0;
  std::string netnsCookie_;  // decimal; empty when the kernel has none
  bool ownNetns_ = false;
};

}  // namespace fg::addon
