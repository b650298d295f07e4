// The event side of the link monitor: one subscribed NETLINK_ROUTE socket that
// carries both notifications and the dumps used to (re)build the namespace's
// mirror (StateMirror), read in bounded batches; what a batch changed in the
// mirror becomes its items. Overruns never stop it: they schedule one
// coalesced resync. No Node dependency; the addon turns its items into JS objects.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "correction_allowance.h"
#include "monitor_io.h"
#include "netlink_parser.h"
#include "netlink_socket.h"
#include "restore_set.h"
#include "result.h"
#include "socket_filter.h"
#include "state_mirror.h"
#include "steady_clock.h"

namespace fg {

// Which neighbour tables the monitor follows.
enum class NeighbourScope : uint8_t {
  kNone,  // links only
  kIp,    // ARP and NDP (RTNLGRP_NEIGH; FDB notifications dropped before anything is made of them)
  kAll,   // ARP, NDP and FDB
};

// Which neighbour changes are handed over (the mirror keeps every entry either way).
enum class NeighbourEvents : uint8_t {
  kAll,
  // Those a restore policy acts on: a permanent entry before or after the
  // change, or a change a process asked for (the kernel's own resolving,
  // failed and NOARP entries stay in the mirror, unreported).
  kPermanent,
};

// Whether a neighbour change is handed over under `events`.
bool Reported(const NeighChange& change, NeighbourEvents events);

struct MonitorOptions {
  NetnsTarget netns;
  int receiveBuffer = 0;  // 0: kernel default
  NeighbourScope neighbours = NeighbourScope::kAll;
  NeighbourEvents neighbourEvents = NeighbourEvents::kAll;
  // Read addr_assign_type from sysfs (this process's namespace only), lazily.
  bool addrAssignType = false;
};

// A correction made in the read that saw the drift (see MonitorCore::Arm).
struct Correction {
  std::array<uint8_t, 6> mac{};   // written back
  size_t neighbours = 0;          // permanent entries re-added
  int64_t queuedNs = 0;           // from the datagram's arrival to reading it
  int64_t macNs = 0;              // from reading the datagram to the MAC write's answer
  int64_t doneNs = 0;             // ... to the last neighbour's ACK
  std::optional<SysError> error;  // the write that failed, if one did
  uint64_t write = 0;             // the MAC write's serial (0: none made), to know its echo
  // The device after the writes (outside the timings): as the kernel's own
  // notification of the MAC write shows it when that is read in the same
  // batch (echoed), else re-read; its name, or empty when it is gone, and its MAC.
  std::string afterName;
  netlink::MacField afterMac;
  // The write's own RTM_NEWLINK was read in the same batch and changed nothing
  // but the MAC: folded into this item instead of reported as another change.
  bool echoed = false;
};

// A device changed (see StateMirror), and/or the record disarmed it: the
// arming is spent (a correction was made) or void (deleted, renamed, not VXLAN).
struct LinkItem {
  int32_t ifindex = 0;
  std::optional<LinkChange> change;
  std::optional<Correction> correction;
  bool disarmed = false;
  // When the datagram that told of it arrived (steady_clock; 0 for a change
  // another's implies, as a device's entries gone with it).
  int64_t arrivalNs = 0;
};

// What to write back, without waiting for JS, when the armed device is seen
// with another MAC: a correction for each rewrite the allowance lets through,
// and the first it refuses ends the arming (JS decides about that one);
// without an allowance, one correction ends it. The neighbour entries put
// back are the device's restore set (see MonitorCore::Keep).
struct ArmedCorrection {
  std::string name;  // the device must still be called this
  std::array<uint8_t, 6> mac{};
  std::optional<CorrectionAllowance> allowance;
};

struct NeighItem {
  NeighChange change;  // portid: requester of the change, when the kernel names one
};

// The first snapshot is complete; changes are reported from now on.
struct ReadyItem {};

// Brackets the dumps of a resync after the first. Between begin and end,
// every object the kernel has is reported (fromDump) where it changed; at an
// end with `consistent`, objects not reported since begin were removed.
struct ResyncItem {
  bool begin = false;
  bool consistent = true;  // end only: every dump completed without interruption
  std::string reason;      // begin only: "initial", "overrun", "requested" or "correction"
};

// The kernel dropped notifications (ENOBUFS), or a datagram was discarded.
struct OverrunItem {
  std::string cause;  // "ENOBUFS" or "truncated"
};

// Something was skipped but monitoring goes on: a malformed datagram, a dump
// that stayed inconsistent, a failed dump request.
struct WarningItem {
  std::string code;  // "EBADMSG", "EAGAIN", errno name of a failed dump
  std::string message;
};

// Reading failed for good; nothing more will be read.
struct FatalItem {
  SysError error;
};

using MonitorItem =
    std::variant<LinkItem, NeighItem, ReadyItem, ResyncItem, OverrunItem, WarningItem, FatalItem>;

// The mirror's changes as items, in order: every link change, and the
// neighbour changes `events` reports. Empties `changes`.
void AppendChangeItems(std::vector<MirrorChange>& changes, NeighbourEvents events,
                       std::vector<MonitorItem>* out);

struct MonitorStats {
  uint64_t wakeups = 0;
  uint64_t datagrams = 0;
  uint64_t messages = 0;
  uint64_t overruns = 0;
  uint64_t resyncs = 0;
  uint64_t dumpRetries = 0;
  uint64_t inconsistentDumps = 0;
  uint64_t foreignSenderDrops = 0;
  uint64_t truncatedDrops = 0;
  uint64_t malformed = 0;
  uint64_t staleReplies = 0;
  uint64_t correctionEchoes = 0;    // neighbour notifications of a correction, not passed on
  uint64_t foldedEchoes = 0;        // a correction's own RTM_NEWLINK, folded into its item
  uint64_t staleRecords = 0;        // an armed drift the re-read found already put back
  uint64_t currentRecords = 0;      // an armed drift with nothing behind it: not re-read
  uint64_t carriedCorrections = 0;  // moved to a later rewrite the write answered too
  uint64_t fdbRemoteResyncs = 0;    // an FDB remote beside another of its MAC: dumped again
};

class MonitorCore {
 public:
  // On the kernel: a subscribed socket in options.netns, a request socket there to write.
  static Result<std::unique_ptr<MonitorCore>> Open(const MonitorOptions& options);
  // On any source and writer (the seam: see monitor_io.h). addr_assign_type is not read.
  MonitorCore(std::unique_ptr<NotificationSource> source, WriterOpener openWriter,
              const MonitorOptions& options, bool readAddrAssignType = false)
      : source_(std::move(source)),
        openWriter_(std::move(openWriter)),
        neighbours_(options.neighbours),
        neighbourEvents_(options.neighbourEvents),
        explicitReceiveBuffer_(options.receiveBuffer > 0),
        readAddrAssignType_(readAddrAssignType) {}

  int fd() const { return source_->fd(); }
  int receiveBuffer() const { return source_->receiveBuffer(); }
  const std::vector<std::string>& warnings() const { return source_->warnings(); }
  const MonitorStats& stats() const { return stats_; }
  // A read failed for good (a FatalItem was produced); the owner should close.
  bool failed() const { return failed_; }
  const StateMirror& mirror() const { return mirror_; }
  // The mirror as it stands, for reading once the monitor is closed.
  StateMirror ReleaseMirror() { return std::move(mirror_); }
  // The device's addr_assign_type (-1 unknown), read from sysfs on first ask
  // after each MAC change when enabled.
  int16_t AddrAssignTypeOf(int32_t ifindex);

  // Asks for a full resync (coalesced with any pending one). It begins in a
  // later read, once everything already queued has been read.
  void RequestResync(const char* reason);

  // Items a read stops at (more can follow in the datagram it was reading);
  // the rest waits for the next wake.
  static constexpr size_t kItemsPerBatch = 512;

  // One wake of the reader: reads until the socket is empty, `maxDatagrams`
  // were read or the batch holds kItemsPerBatch items. `arrivalNs`: when the
  // data arrived (steady_clock; 0: now).
  void ReadAvailable(size_t maxDatagrams, int64_t arrivalNs, std::vector<MonitorItem>* out);

  // Starts keeping the device's restore set - the permanent ARP/NDP entries a
  // MAC change flushes, to put back - as its entries are in the mirror now,
  // unless one is kept already; then takes `recovered` in (entries the
  // guard's state says were flushed while it was down). From then on the set
  // follows the device's table as notifications are read (FollowRestoreSet),
  // until the device is deleted or released: the one account of what a
  // correction puts back, whoever makes it.
  void Keep(int32_t ifindex, std::vector<netlink::NeighbourEntry> recovered);
  // Stops keeping the device's restore set, and disarms it.
  void Release(int32_t ifindex);
  const RestoreSet* RestoreSetOf(int32_t ifindex) const {
    auto found = restoreSets_.find(ifindex);
    return found == restoreSets_.end() ? nullptr : &found->second;
  }

  // Arms a correction for a kept device (replacing any armed one): the first
  // notification or dump reply showing the device, still under that name,
  // with a MAC other than `mac` is answered right there - the MAC set back,
  // the restore set re-added - before anything is handed to JS, and so is
  // each later one the arming's allowance lets through. Policy (whether a
  // correction is due now) stays with the caller, which re-arms when it
  // changes. Opens the write socket on first use. EINVAL for a device whose
  // restore set is not kept.
  Result<Unit> Arm(int32_t ifindex, ArmedCorrection correction);
  void Disarm(int32_t ifindex) { armed_.erase(ifindex); }
  // What the device is armed with (null: nothing), for tests.
  const ArmedCorrection* ArmedFor(int32_t ifindex) const {
    auto found = armed_.find(ifindex);
    return found == armed_.end() ? nullptr : &found->second;
  }

  // Narrows the monitor to the devices `filter` lets through: the kernel keeps
  // unrelated link notifications out of the socket (see socket_filter.h), and
  // dump replies and neighbour messages of other devices are dropped here,
  // before anything is made of them. Without a filter, everything is read.
  Result<Unit> SetFilter(const std::optional<LinkFilter>& filter);

  // What the core reads the time from (steady_clock ns by default): a test's own clock
  // makes the arrivals and timings of the corrections it reports its own.
  void SetClock(std::function<int64_t()> clock) { clock_ = std::move(clock); }

  // When the data of the batch last read arrived (steady_clock ns): its first datagram.
  int64_t batchArrivalNs() const { return batchArrivalNs_; }

 private:
  enum class Phase : uint8_t { kIdle, kLinks, kNeighbours, kFdb };

  bool Matches(const netlink::LinkRecord& link) const;
  // Whether a record reaches the consumer under the filter.
  bool Keep(const netlink::LinkRecord& link);
  bool Keep(const netlink::NeighRecord& neigh) const;

  // Answers a link record for an armed device whose MAC drifted; `disarmed`
  // is set when the arming is gone after it (spent or void).
  std::optional<Correction> CorrectIfArmed(const netlink::LinkRecord& link, bool* disarmed);
  // Whether a write (anyone's) may have followed the record of `ifindex` being handled.
  bool MayPredateAWrite(int32_t ifindex);
  // Whether a neighbour notification is the echo of a correction: the flush of
  // an entry it put back (the rewrite's, still queued) or its own re-add.
  bool IsCorrectionEcho(const netlink::NeighRecord& neigh);
  // A device's restore set follows its entries as the guard's policy does, the
  // moment a notification is read: a permanent ARP/NDP entry added or changed
  // is taken in, one deleted on purpose or made non-permanent by a process is
  // dropped (a flush keeps it). A rewrite read in the same batch, before JS
  // has re-armed, then puts back the table as it is now.
  void FollowRestoreSet(const NeighChange& change);
  // Grows the receive buffer (unless it was set explicitly) to hold a flush of
  // `entries` neighbour entries and their re-adds, with room to spare.
  void SizeReceiveBufferFor(size_t entries);

  void Drain(size_t maxDatagrams, std::vector<MonitorItem>* out);
  void HandleDatagram(const uint8_t* data, size_t length, std::vector<MonitorItem>* out);
  void MarkResyncPending(const char* reason);
  // Notifications were lost (`cause`: ENOBUFS, truncated): reported, and a resync follows.
  void NoteLostNotifications(const char* cause, std::vector<MonitorItem>* out);
  void BeginResync(std::vector<MonitorItem>* out);
  void SendDump(std::vector<MonitorItem>* out);
  void FinishDump(int32_t error, std::vector<MonitorItem>* out);
  void HandleMessage(netlink::Message& message, std::vector<MonitorItem>* out);
  // Applies a link record to the mirror; `correction` was made for it; `echoOf`: the serial
  // of the correction's write whose notification it is (0: none).
  void ApplyLink(netlink::LinkRecord link, bool fromDump, std::optional<Correction> correction,
                 bool disarmed, uint64_t echoOf, std::vector<MonitorItem>* out);
  // The mirror's changes as items (neighbour changes as neighbourEvents_ says).
  void Emit(std::vector<MirrorChange>& changes, std::vector<MonitorItem>* out);
  // Folds the notification of write `echoOf` into the item of its correction, when that is
  // still in `out` (not yet handed over).
  bool FoldEcho(uint64_t echoOf, const netlink::LinkRecord& echo, std::vector<MonitorItem>* out);
  // Moves to `item` (a MAC change of its device) the correction an earlier item carries whose
  // write has not been echoed yet: that write came after this rewrite and answered it too.
  void CarryCorrectionTo(LinkItem& item, std::vector<MonitorItem>* out);
  // Re-reads the devices of the corrections from out[first] on whose echo was
  // not read with them: what the device is after the writes.
  void RereadUnconfirmed(std::vector<MonitorItem>* out, size_t first);
  // Fills in addr_assign_type for a change about to be handed over.
  void Resolve(LinkChange& change);

  std::unique_ptr<NotificationSource> source_;
  WriterOpener openWriter_;
  NeighbourScope neighbours_;
  NeighbourEvents neighbourEvents_;
  StateMirror mirror_;
  std::vector<MirrorChange> changes_;         // scratch: one message's changes
  std::unique_ptr<CorrectionWriter> writer_;  // opened by the first Arm
  std::unordered_map<int32_t, ArmedCorrection> armed_;
  std::unordered_map<int32_t, RestoreSet> restoreSets_;
  // Per device, the notifications of a correction's entries not read yet, by
  // (family, destination). Until the echo of the correction's own MAC write
  // is read, every one predates the re-adds: a state the write flushed and the
  // re-adds replaced (the rewrite's flush, another writer's re-add). After it,
  // the write's own flush of an entry present then, and the re-add's
  // notification; anything else is someone's. Emptied once the socket is
  // drained, or by the device's next link message: every echo was read by then.
  // (With a kernel filter the re-adds never arrive: see LinkFilter::ownRequests.)
  struct PendingEcho {
    std::array<uint8_t, 6> lladdr{};
    bool present = false;  // in the kernel, as the notifications read so far say
    bool readdRead = false;
  };
  struct CorrectionEchoes {
    size_t writesAhead = 0;  // earlier MAC writes whose notifications come first
    bool writeRead = false;  // its own MAC write's notification has been read
    std::unordered_map<std::string, PendingEcho> entries;
  };
  std::unordered_map<int32_t, CorrectionEchoes> echoes_;
  // Per device, the MACs the corrections wrote whose notifications have not
  // been read, oldest first. The kernel names no writer in a link message: a
  // notification of one of these MACs is taken for the oldest write's. (So
  // another writer setting the same MAC before it is read is taken for ours.)
  struct UnreadWrite {
    std::array<uint8_t, 6> mac{};
    uint64_t serial = 0;
  };
  // A vector, not a deque: it holds a few (the corrections not read back yet, which the
  // allowance bounds), and an empty deque already allocates twice.
  std::unordered_map<int32_t, std::vector<UnreadWrite>> unreadWrites_;
  uint64_t writeSerial_ = 0;
  // Follows the device's link messages: the read of a correction's own MAC
  // write, and any later one, which ends its echoes. Returns that write's
  // serial when `link` is its notification, else 0.
  uint64_t FollowCorrectionEchoes(const netlink::LinkRecord& link);
  // Every notification caused so far has been read (or lost to an overrun).
  void ForgetEchoes();
  // Applies filter_ with the write socket's port id (once it is open).
  Result<Unit> ApplyFilter();
  bool explicitReceiveBuffer_ = false;
  bool readAddrAssignType_ = false;
  size_t dumpedNeighbours_ = 0;  // neighbour records of the resync under way
  std::optional<LinkFilter> filter_;
  std::unordered_set<int32_t> kept_;  // devices inside the filter's view
  Phase phase_ = Phase::kIdle;
  bool failed_ = false;
  bool resyncPending_ = false;
  const char* pendingReason_ = "initial";
  bool resyncConsistent_ = true;
  bool dumpInterrupted_ = false;
  int dumpAttempt_ = 0;
  uint32_t dumpSeq_ = 0;
  DatagramSlots slots_;
  std::vector<NetlinkSocket::Datagram> datagrams_;  // scratch: one read's
  netlink::ParsedDatagram parsed_;  // scratch: one datagram's messages, its storage kept
  bool wrote_ = false;              // a correction wrote since the last read
  // Where the message being handled is in what was read: what follows it is looked at for a
  // later notification of its device (MayPredateAWrite).
  struct Lookahead {
    const netlink::ParsedDatagram* datagram = nullptr;  // the one being handled
    size_t message = 0;                                 // its message being handled
    size_t nextDatagram = 0;                            // in datagrams_
  };
  Lookahead lookahead_;
  MonitorStats stats_;
  int64_t batchArrivalNs_ = 0;
  // The arrival of the datagram being handled: the batch's for its first; a later one
  // arrived after that and no later than the read that returned it, which is taken (a
  // drift is never reported longer than it lasted).
  int64_t datagramArrivalNs_ = 0;
  bool handledOne_ = false;  // in this wake
  std::function<int64_t()> clock_ = SteadyNowNs;
};

}  // namespace fg
