// probePaths() and sampleChecksums(): the path probes of native/path_probe.h
// and the checksum sample of native/checksum_sample.h on the thread pool (each
// waits up to its timeout, which must not hold the event loop or a Control's
// lock), settling a promise.
#pragma once

#include <napi.h>

namespace fg::addon {

// probePaths({ netns?, netnsLabel?, device, timeoutMs, udpPort, tcpPort, echoId },
//            addresses: string[]) -> Promise<{ address, echo, udp, tcp }[]>
Napi::Value ProbePaths(const Napi::CallbackInfo& info);

// sampleChecksums({ netns?, netnsLabel?, device, timeoutMs, maxFrames })
//   -> Promise<{ frames, checked, bad, senders: { mac, udp, tcp }[] }>
Napi::Value SampleChecksums(const Napi::CallbackInfo& info);

}  // namespace fg::addon
