#include "monitor_core.h"

#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "neighbour_batch.h"
#include "sysfs.h"

namespace fg {
bool Reported(const NeighChange& change, NeighbourEvents events) {
  if (events == NeighbourEvents::kAll || change.portid != 0) return true;
  return (change.neigh.state & NUD_PERMANENT) != 0 ||
         (change.previous && (change.previous->state & NUD_PERMANENT) != 0);
}

Result<std::unique_ptr<MonitorCore>> MonitorCore::Open(const MonitorOptions& options) {
  SocketOptions socketOptions;
  socketOptions.receiveBuffer = options.receiveBuffer;
  socketOptions.groups.push_back(RTNLGRP_LINK);
  if (options.neighbours != NeighbourScope::kNone) socketOptions.groups.push_back(RTNLGRP_NEIGH);
  Result<NetlinkSocket> socket = NetlinkSocket::Open(options.netns, socketOptions);
  if (!socket.ok()) return socket.error();
  // /sys describes this process's namespace only.
  bool readAddrAssignType = false;
  if (options.addrAssignType) {
    Result<uint64_t> target = NetnsInode(options.netns);
    Result<uint64_t> own = NetnsInode(NetnsTarget{});
    readAddrAssignType = target.ok() && own.ok() && target.value() == own.value();
  }
  return std::make_unique<MonitorCore>(std::make_unique<SocketSource>(std::move(socket.value())),
                                       RequesterWriter::Opener(options.netns), options,
                                       readAddrAssignType);
}

Result<Unit> MonitorCore::ApplyFilter() {
  if (!filter_) return source_->SetFilter({});
  LinkFilter filter = *filter_;
  if (writer_) filter.ownRequests = writer_->portid();
  return source_->SetFilter(BuildLinkFilter(filter));
}

Result<Unit> MonitorCore::SetFilter(const std::optional<LinkFilter>& filter) {
  const std::optional<LinkFilter> before = std::move(filter_);
  filter_ = filter;
  if (Result<Unit> set = ApplyFilter(); !set.ok()) {
    filter_ = before;
    return set;
  }
  if (!filter_) return Unit{};
  kept_.insert(filter_->ifindexes.begin(), filter_->ifindexes.end());
  // What the view no longer covers leaves the mirror silently.
  std::vector<int32_t> outside;
  for (const auto& [ifindex, link] : mirror_.links()) {
    if (!Matches(link.record)) outside.push_back(ifindex);
  }
  for (int32_t ifindex : outside) {
    mirror_.Forget(ifindex);
    kept_.erase(ifindex);
  }
  return Unit{};
}

bool MonitorCore::Matches(const netlink::LinkRecord& link) const {
  if (std::find(filter_->ifindexes.begin(), filter_->ifindexes.end(), link.ifindex) !=
      filter_->ifindexes.end()) {
    return true;
  }
  for (const std::string& prefix : filter_->namePrefixes) {
    if (link.name.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

bool MonitorCore::Keep(const netlink::LinkRecord& link) {
  if (!filter_) return true;
  const bool wasKept = kept_.count(link.ifindex) > 0;
  if (!link.deleted && Matches(link)) {
    kept_.insert(link.ifindex);
    return true;
  }
  // Passed on once more when it leaves the view (deleted, renamed out), so
  // the consumer drops it; never seen otherwise.
  kept_.erase(link.ifindex);
  return wasKept;
}

bool MonitorCore::Keep(const netlink::NeighRecord& neigh) const {
  if (neigh.family == AF_BRIDGE && neighbours_ != NeighbourScope::kAll) return false;
  return !filter_ || kept_.count(neigh.ifindex) > 0;
}

void MonitorCore::Keep(int32_t ifindex, std::vector<netlink::NeighbourEntry> recovered) {
  auto [set, created] = restoreSets_.try_emplace(ifindex);
  if (created) {
    for (const auto& [key, neigh] : mirror_.neighs()) {
      if (neigh.record.ifindex == ifindex && Restorable(neigh.record)) {
        set->second.Upsert(RestoreEntryOf(neigh.record));
      }
    }
  }
  for (netlink::NeighbourEntry& entry : recovered) {
    entry.ifindex = ifindex;
    set->second.Upsert(std::move(entry));
  }
  SizeReceiveBufferFor(set->second.size());
}

void MonitorCore::Release(int32_t ifindex) {
  armed_.erase(ifindex);
  restoreSets_.erase(ifindex);
  echoes_.erase(ifindex);
  unreadWrites_.erase(ifindex);
}

Result<Unit> MonitorCore::Arm(int32_t ifindex, ArmedCorrection correction) {
  if (restoreSets_.count(ifindex) == 0) {
    // Read here before JS heard of it, a deletion leaves JS arming a device that is gone
    // (a deferred correction's timer, a batch still on its way): nothing to arm, no error.
    if (mirror_.FindLink(ifindex) == nullptr) return Unit{};
    return SysError(EINVAL, "arm", "the device's restore set is not kept (Keep it first)");
  }
  if (!writer_) {
    Result<std::unique_ptr<CorrectionWriter>> writer = openWriter_();
    if (!writer.ok()) return writer.error();
    writer_ = std::move(writer.value());
    // From now on the kernel keeps the write socket's own re-adds out.
    if (Result<Unit> filtered = ApplyFilter(); !filtered.ok()) return filtered.error();
  }
  armed_[ifindex] = std::move(correction);
  return Unit{};
}

namespace {
// Caps the receive buffer grown for a neighbour table (~32 000 entries).
constexpr size_t kMaxAutoReceiveBuffer = size_t{64} << 20;
// Room beyond the flush and re-adds, for whatever else arrives meanwhile.
constexpr size_t kSpareNotifications = 512;
}  // namespace

void MonitorCore::FollowRestoreSet(const NeighChange& change) {
  const netlink::NeighRecord& neigh = change.neigh;
  if (neigh.family == AF_BRIDGE) return;
  auto set = restoreSets_.find(neigh.ifindex);
  if (set == restoreSets_.end()) return;
  const bool permanent = (neigh.state & NUD_PERMANENT) != 0;
  if (change.kind == ChangeKind::kRemoved) {
    // Deleted on purpose; a flush (the kernel's, after a MAC change or a down)
    // or a re-dump's miss keeps the entry for restoring.
    if (permanent && change.cause == RemovalCause::kDeleted)
      set->second.Remove(RestoreEntryOf(neigh));
  } else if (Restorable(neigh)) {
    set->second.Upsert(RestoreEntryOf(neigh));
  } else if (!permanent && change.portid != 0) {
    set->second.Remove(RestoreEntryOf(neigh));  // a process made it non-permanent on purpose
  }
}

void MonitorCore::SizeReceiveBufferFor(size_t entries) {
  if (explicitReceiveBuffer_) return;
  // A MAC change flushes every entry (one RTM_DELNEIGH each) and the
  // correction re-adds them (one RTM_NEWNEIGH each), all queued before the
  // monitor reads again; sd-netlink and NetworkManager size theirs likewise.
  const size_t bytes =
      std::min((2 * entries + kSpareNotifications) * netlink::kReplyCharge, kMaxAutoReceiveBuffer);
  if (bytes > static_cast<size_t>(source_->receiveBuffer())) {
    source_->EnsureReceiveBuffer(static_cast<int>(bytes));  // best effort: overruns stay handled
  }
}

bool MonitorCore::IsCorrectionEcho(const netlink::NeighRecord& neigh) {
  auto device = echoes_.find(neigh.ifindex);
  if (device == echoes_.end()) return false;
  auto entry = device->second.entries.find(NeighbourKey(neigh.family, neigh.destination));
  if (entry == device->second.entries.end()) return false;
  PendingEcho& pending = entry->second;
  bool echo = false;
  if (!device->second.writeRead) {
    // Queued before the write: the entry as it was when the write flushed it.
    pending.present = !neigh.deleted;
    echo = true;
  } else if (neigh.deleted) {
    // The write's flush of an entry present then, once: another delete is someone's.
    echo = pending.present;
    pending.present = false;
    if (!echo) device->second.entries.erase(entry);
  } else {
    echo = !pending.readdRead && (neigh.state & NUD_PERMANENT) != 0 &&
           neigh.lladdr.state == netlink::MacField::State::kValid &&
           neigh.lladdr.bytes == pending.lladdr;
    pending.readdRead = true;
    // Re-added, or changed by someone else: passed on from now.
    if (!echo || !pending.present) device->second.entries.erase(entry);
  }
  if (device->second.entries.empty()) echoes_.erase(device);
  if (echo) ++stats_.correctionEchoes;
  return echo;
}

uint64_t MonitorCore::FollowCorrectionEchoes(const netlink::LinkRecord& link) {
  uint64_t ownWrite = 0;
  if (auto unread = unreadWrites_.find(link.ifindex); unread != unreadWrites_.end()) {
    if (link.deleted) {
      unreadWrites_.erase(unread);
    } else if (link.mac.state == netlink::MacField::State::kValid &&
               link.mac.bytes == unread->second.front().mac) {
      ownWrite = unread->second.front().serial;
      unread->second.erase(unread->second.begin());
      if (unread->second.empty()) unreadWrites_.erase(unread);
    }
  }
  auto device = echoes_.find(link.ifindex);
  if (device == echoes_.end()) return ownWrite;
  CorrectionEchoes& echoes = device->second;
  // rtnetlink notifies a MAC write before the flush it causes, all under RTNL:
  // no other link message of the device comes between them.
  if (!echoes.writeRead && ownWrite != 0) {
    if (echoes.writesAhead > 0) {
      --echoes.writesAhead;
    } else {
      echoes.writeRead = true;
    }
  } else if (echoes.writeRead || link.deleted) {
    echoes_.erase(device);
  }
  return ownWrite;
}

void MonitorCore::ForgetEchoes() {
  echoes_.clear();
  unreadWrites_.clear();
}

std::optional<Correction> MonitorCore::CorrectIfArmed(const netlink::LinkRecord& link,
                                                      bool* disarmed) {
  auto armed = armed_.find(link.ifindex);
  if (armed == armed_.end()) return std::nullopt;
  // Only a VXLAN device under the armed name is ever written to: anything else
  // is another device now, or gone, and the caller decides afresh.
  if (link.deleted || link.name != armed->second.name || link.kind != "vxlan") {
    armed_.erase(armed);
    *disarmed = true;
    return std::nullopt;
  }
  if (link.mac.state != netlink::MacField::State::kValid || link.mac.bytes == armed->second.mac) {
    return std::nullopt;  // nothing to correct; stays armed
  }
  const int64_t started = clock_();
  // The record may predate a write already made (the guard's own, or another writer's,
  // queued behind it): then the device is re-read, and written only if it still differs.
  // A MAC write flushes the device's permanent entries even when it changes nothing, so a
  // second write of the same MAC would cost the whole table.
  if (MayPredateAWrite(link.ifindex)) {
    Result<netlink::LinkRecord> current = writer_->GetLink(link.ifindex);
    if (current.ok() &&
        (current.value().name != armed->second.name || current.value().kind != "vxlan")) {
      armed_.erase(armed);  // another device now: its own notification follows
      *disarmed = true;
      return std::nullopt;
    }
    if (current.ok() && current.value().mac.state == netlink::MacField::State::kValid &&
        current.value().mac.bytes == armed->second.mac) {
      ++stats_.staleRecords;
      return std::nullopt;  // already back: nothing to write; stays armed
    }
  } else {
    ++stats_.currentRecords;
  }
  const std::array<uint8_t, 6> mac = armed->second.mac;
  std::optional<CorrectionAllowance>& allowance = armed->second.allowance;
  if (!allowance || !allowance->Take(datagramArrivalNs_)) {
    const bool refused = allowance.has_value();
    armed_.erase(armed);  // spent (one correction) or refused (JS decides about this one)
    *disarmed = true;
    if (refused) return std::nullopt;
  }
  const int64_t queuedNs = started - datagramArrivalNs_;
  const auto since = [this, started] { return clock_() - started; };
  wrote_ = true;
  Correction correction;
  correction.mac = mac;
  correction.queuedNs = queuedNs > 0 ? queuedNs : 0;
  const auto set = restoreSets_.find(link.ifindex);
  static const std::vector<netlink::NeighbourEntry> kNoEntries;
  const std::vector<netlink::NeighbourEntry>& entries =
      set != restoreSets_.end() ? set->second.entries() : kNoEntries;
  CorrectionWrites writes = writer_->WriteCorrection(link.ifindex, mac, entries, clock_);
  correction.macNs = writes.macAnsweredNs - started;
  correction.neighbours = writes.neighbours.written;
  echoes_.erase(link.ifindex);
  if (writes.macError) {
    correction.error = std::move(writes.macError);
    // The kernel took the entries all the same, and their notifications are filtered out:
    // the table is read again to know them.
    if (writes.neighbours.written > 0) MarkResyncPending("correction");
  } else {
    std::vector<UnreadWrite>& unread = unreadWrites_[link.ifindex];
    const size_t writesAhead = unread.size();
    correction.write = ++writeSerial_;
    unread.push_back(UnreadWrite{mac, correction.write});
    correction.error = std::move(writes.neighbours.error);
    if (!correction.error && !entries.empty()) {
      // Every entry is back, as the kernel's ACKs say: the mirror learns them from those (the
      // kernel filter keeps the re-adds' notifications out), and the notifications between
      // the rewrite and the re-adds say nothing new (see CorrectionEchoes). An entry the
      // mirror holds still has its flush to be read; one flushed before (a write of the same
      // MAC, a down) is back without one.
      CorrectionEchoes& echoes = echoes_[link.ifindex];
      echoes.writesAhead = writesAhead;
      echoes.entries.reserve(entries.size());
      const std::vector<bool>& held = set->second.Held(mirror_, link.ifindex);
      std::vector<MirrorChange> learnt;
      for (size_t i = 0; i < entries.size(); ++i) {
        const netlink::NeighbourEntry& entry = entries[i];
        PendingEcho pending{entry.lladdr};
        pending.present = held[i];
        echoes.entries[NeighbourKey(entry.family, entry.destination)] = pending;
        if (!pending.present)
          mirror_.ApplyNeigh(RecordOf(entry), false, writer_->portid(), &learnt);
      }
    }
  }
  correction.doneNs = since();
  // The device as it is after the writes comes from the kernel's notification
  // of the MAC write, when it is read in this batch (FoldEcho), else from a
  // re-read once the batch is read (RereadUnconfirmed).
  if (correction.error) correction.error->interface = link.name;
  return correction;
}

// rtnetlink queues a change's notification on every listening socket before the request that
// made it returns. So a record with nothing read or queued behind it is the device as it is now:
// no write (the guard's own, the JS path's, anyone's) came after it, and the round trip of a
// re-read is saved. Anything behind it, an unread write of ours, or an error on the socket
// (lost notifications) may be such a write.
bool MonitorCore::MayPredateAWrite(int32_t ifindex) {
  if (unreadWrites_.count(ifindex) > 0) return true;
  // Read already: the rest of this datagram, then the rest of this read's datagrams.
  if (lookahead_.datagram != nullptr) {
    const std::vector<netlink::Message>& messages = lookahead_.datagram->messages;
    for (size_t i = lookahead_.message + 1; i < messages.size(); ++i) {
      const auto* link = std::get_if<netlink::LinkRecord>(&messages[i].body);
      if ((link != nullptr && link->ifindex == ifindex) ||
          std::holds_alternative<netlink::MalformedRecord>(messages[i].body)) {
        return true;
      }
    }
    if (lookahead_.datagram->error) return true;
  }
  for (size_t i = lookahead_.nextDatagram; i < datagrams_.size(); ++i) {
    const NetlinkSocket::Datagram& datagram = datagrams_[i];
    if (datagram.kind == NetlinkSocket::Received::kOverrun ||
        datagram.kind == NetlinkSocket::Received::kTruncated ||
        (datagram.kind == NetlinkSocket::Received::kDatagram &&
         netlink::MayNotifyLink(datagram.data, datagram.length, ifindex))) {
      return true;
    }
  }
  // Not read yet: anything at all.
  Result<bool> readable = source_->WaitReadable(0);
  return !readable.ok() || readable.value();
}

void MonitorCore::RequestResync(const char* reason) {
  if (!failed_) MarkResyncPending(reason);
}

void MonitorCore::MarkResyncPending(const char* reason) {
  if (!resyncPending_) pendingReason_ = reason;  // coalesced: one pass covers every request
  resyncPending_ = true;
}

void MonitorCore::NoteLostNotifications(const char* cause, std::vector<MonitorItem>* out) {
  out->emplace_back(OverrunItem{cause});
  // A resync under way can no longer tell what is gone: what was re-added by
  // a lost notification is missing from it too. Its end applies no removals;
  // the resync that follows does.
  if (phase_ != Phase::kIdle) resyncConsistent_ = false;
  MarkResyncPending("overrun");
}

void MonitorCore::BeginResync(std::vector<MonitorItem>* out) {
  resyncPending_ = false;
  ++stats_.resyncs;
  if (mirror_.ready()) {
    ResyncItem begin;
    begin.begin = true;
    begin.reason = pendingReason_;
    out->push_back(std::move(begin));
  }
  mirror_.BeginResync();
  resyncConsistent_ = true;
  // The dumps report the table as it is; a correction's echoes are part of it.
  ForgetEchoes();
  dumpedNeighbours_ = 0;
  phase_ = Phase::kLinks;
  dumpAttempt_ = 1;
  SendDump(out);
}

void MonitorCore::SendDump(std::vector<MonitorItem>* out) {
  dumpSeq_ = source_->NextSeq();
  dumpInterrupted_ = false;
  std::vector<uint8_t> request;
  switch (phase_) {
    case Phase::kLinks:
      request = netlink::BuildDumpRequest(RTM_GETLINK, AF_UNSPEC, dumpSeq_);
      break;
    case Phase::kNeighbours:
      request = netlink::BuildDumpRequest(RTM_GETNEIGH, AF_UNSPEC, dumpSeq_);
      break;
    case Phase::kFdb:
      request = netlink::BuildDumpRequest(RTM_GETNEIGH, AF_BRIDGE, dumpSeq_);
      break;
    case Phase::kIdle:
      return;
  }
  Result<Unit> sent = source_->Send(request);
  if (!sent.ok()) FinishDump(-sent.error().errnum, out);
}

void MonitorCore::FinishDump(int32_t error, std::vector<MonitorItem>* out) {
  if (error == 0 && dumpInterrupted_) {
    if (dumpAttempt_ < kDumpAttempts) {
      ++dumpAttempt_;
      ++stats_.dumpRetries;
      SendDump(out);
      return;
    }
    ++stats_.inconsistentDumps;
    resyncConsistent_ = false;
    out->push_back(WarningItem{
        "EAGAIN", "dump still inconsistent after " + std::to_string(kDumpAttempts) + " attempts"});
  } else if (error != 0) {
    resyncConsistent_ = false;
    out->push_back(WarningItem{ErrnoName(-error),
                               "dump request failed: " + std::string(std::strerror(-error))});
  }

  switch (phase_) {
    case Phase::kLinks:
      phase_ = neighbours_ != NeighbourScope::kNone ? Phase::kNeighbours : Phase::kIdle;
      break;
    case Phase::kNeighbours:
      phase_ = neighbours_ == NeighbourScope::kAll ? Phase::kFdb : Phase::kIdle;
      break;
    case Phase::kFdb:
    case Phase::kIdle:
      phase_ = Phase::kIdle;
      break;
  }
  if (phase_ != Phase::kIdle) {
    dumpAttempt_ = 1;
    SendDump(out);
    return;
  }
  const bool wasReady = mirror_.ready();
  mirror_.EndResync(resyncConsistent_, &changes_);
  Emit(changes_, out);
  if (wasReady) {
    ResyncItem end;
    end.consistent = resyncConsistent_;
    out->push_back(std::move(end));
  } else {
    out->push_back(ReadyItem{});
  }
  SizeReceiveBufferFor(dumpedNeighbours_);
  // A resync requested meanwhile begins once the socket is drained (Drain).
}

void MonitorCore::HandleMessage(netlink::Message& message, std::vector<MonitorItem>* out) {
  ++stats_.messages;
  const bool ours = message.portid == source_->portid();
  if (ours && phase_ != Phase::kIdle && message.seq == dumpSeq_) {
    if (message.flags & NLM_F_DUMP_INTR) dumpInterrupted_ = true;
    if (auto* link = std::get_if<netlink::LinkRecord>(&message.body)) {
      bool disarmed = false;
      std::optional<Correction> correction = CorrectIfArmed(*link, &disarmed);
      ApplyLink(std::move(*link), true, std::move(correction), disarmed, 0, out);
    } else if (auto* neigh = std::get_if<netlink::NeighRecord>(&message.body)) {
      if (Keep(*neigh)) {
        ++dumpedNeighbours_;
        mirror_.ApplyNeigh(std::move(*neigh), true, 0, &changes_);
        Emit(changes_, out);
      }
    } else if (auto* done = std::get_if<netlink::DoneRecord>(&message.body)) {
      FinishDump(done->error, out);
    } else if (auto* ack = std::get_if<netlink::AckRecord>(&message.body)) {
      if (ack->error != 0) FinishDump(ack->error, out);
    } else if (auto* malformed = std::get_if<netlink::MalformedRecord>(&message.body)) {
      ++stats_.malformed;
      dumpInterrupted_ = true;  // an entry was lost: walk the table again
      out->push_back(WarningItem{"EBADMSG", malformed->reason});
    }
    return;
  }
  if (ours) {
    ++stats_.staleReplies;
    return;
  }
  if (auto* link = std::get_if<netlink::LinkRecord>(&message.body)) {
    const uint64_t echoOf = FollowCorrectionEchoes(*link);
    bool disarmed = false;
    std::optional<Correction> correction = CorrectIfArmed(*link, &disarmed);
    if (link->deleted) {
      restoreSets_.erase(link->ifindex);
    } else if (link->kind == "vxlan" && mirror_.FindLink(link->ifindex) == nullptr && Keep(*link)) {
      // A device created now: its restore set follows its table from the start, before JS
      // takes it on (Keep): entries added at once and flushed by a rewrite right after (udev's,
      // within milliseconds) are kept even when JS comes to it later.
      restoreSets_.try_emplace(link->ifindex);
    }
    ApplyLink(std::move(*link), false, std::move(correction), disarmed, echoOf, out);
  } else if (auto* neigh = std::get_if<netlink::NeighRecord>(&message.body)) {
    if (IsCorrectionEcho(*neigh)) return;
    if (Keep(*neigh)) {
      // A remote that may have replaced another: the dump says which are left.
      if (!neigh->deleted && mirror_.ready() && mirror_.HasOtherRemote(*neigh)) {
        ++stats_.fdbRemoteResyncs;
        MarkResyncPending("requested");
      }
      mirror_.ApplyNeigh(std::move(*neigh), false, message.portid, &changes_);
      for (const MirrorChange& change : changes_) FollowRestoreSet(std::get<NeighChange>(change));
      Emit(changes_, out);
    }
  } else if (auto* malformed = std::get_if<netlink::MalformedRecord>(&message.body)) {
    ++stats_.malformed;
    out->push_back(WarningItem{"EBADMSG", malformed->reason});
  }
}

void MonitorCore::ApplyLink(netlink::LinkRecord link, bool fromDump,
                            std::optional<Correction> correction, bool disarmed, uint64_t echoOf,
                            std::vector<MonitorItem>* out) {
  const int32_t ifindex = link.ifindex;
  const bool kept = Keep(link);
  if (kept) {
    mirror_.ApplyLink(std::move(link), fromDump, &changes_);
    if (correction && !correction->error) mirror_.NoteCorrection(ifindex, correction->mac);
  }
  // The device's own change comes last in changes_ (its entries, when it was
  // deleted, before it): the correction and the disarming travel with it.
  std::optional<LinkChange> own;
  if (!changes_.empty() && std::holds_alternative<LinkChange>(changes_.back())) {
    own = std::move(std::get<LinkChange>(changes_.back()));
    changes_.pop_back();
  }
  Emit(changes_, out);
  if (own && own->correctionEcho && !correction && !disarmed && FoldEcho(echoOf, own->link, out)) {
    return;
  }
  if (!own && !correction && !disarmed) return;
  if (own) Resolve(*own);
  LinkItem item{ifindex, std::move(own), std::move(correction), disarmed, datagramArrivalNs_};
  if (!item.correction && !disarmed) CarryCorrectionTo(item, out);
  out->push_back(std::move(item));
}

// Rewrites queued behind the one a correction was made for predate its write (the kernel
// reports changes in order, and the write's echo has not come yet): the write answered them
// too. The correction travels with the last of them, so that JS hears every rewrite before
// the answer to it, never a rewrite after its answer.
void MonitorCore::CarryCorrectionTo(LinkItem& item, std::vector<MonitorItem>* out) {
  const LinkChange* change = item.change ? &*item.change : nullptr;
  if (!change || change->kind != ChangeKind::kChanged || change->fromDump || !change->previous ||
      (change->previous->mac.state == change->link.mac.state &&
       change->previous->mac.bytes == change->link.mac.bytes)) {
    return;
  }
  for (auto earlier = out->rbegin(); earlier != out->rend(); ++earlier) {
    auto* link = std::get_if<LinkItem>(&*earlier);
    if (!link || link->ifindex != item.ifindex) continue;
    if (!link->correction) {
      if (link->disarmed || (link->change && link->change->kind != ChangeKind::kChanged)) return;
      continue;  // a change of something else (flags, a name) before the write
    }
    if (link->correction->error || link->correction->echoed) return;
    item.correction = std::move(link->correction);
    link->correction.reset();
    item.arrivalNs = link->arrivalNs;  // the correction is timed from its own rewrite
    ++stats_.carriedCorrections;
    return;
  }
}

// The echo of a correction made in this batch is part of it: the item that
// carries the correction says so, and listeners see one change per rewrite.
// It is also the kernel's account of the device after the write: the re-read.
bool MonitorCore::FoldEcho(uint64_t echoOf, const netlink::LinkRecord& echo,
                           std::vector<MonitorItem>* out) {
  if (echoOf == 0) return false;
  for (auto item = out->rbegin(); item != out->rend(); ++item) {
    auto* link = std::get_if<LinkItem>(&*item);
    if (!link || link->ifindex != echo.ifindex || !link->correction) continue;
    if (link->correction->write != echoOf) continue;
    if (link->correction->error || link->correction->echoed) return false;
    link->correction->echoed = true;
    link->correction->afterName = echo.name;
    link->correction->afterMac = echo.mac;
    ++stats_.foldedEchoes;
    return true;
  }
  return false;
}

void MonitorCore::RereadUnconfirmed(std::vector<MonitorItem>* out, size_t first) {
  for (size_t i = first; i < out->size(); ++i) {
    auto* link = std::get_if<LinkItem>(&(*out)[i]);
    if (!link || !link->correction || link->correction->error || link->correction->echoed) {
      continue;
    }
    Correction& correction = *link->correction;
    if (Result<netlink::LinkRecord> after = writer_->GetLink(link->ifindex); after.ok()) {
      correction.afterName = after.value().name;
      correction.afterMac = after.value().mac;
    }
  }
}

void AppendChangeItems(std::vector<MirrorChange>& changes, NeighbourEvents events,
                       std::vector<MonitorItem>* out) {
  for (MirrorChange& change : changes) {
    if (auto* link = std::get_if<LinkChange>(&change)) {
      const int32_t ifindex = link->link.ifindex;
      out->push_back(LinkItem{ifindex, std::move(*link), std::nullopt, false});
    } else if (NeighChange& neigh = std::get<NeighChange>(change); Reported(neigh, events)) {
      out->push_back(NeighItem{std::move(neigh)});
    }
  }
  changes.clear();
}

void MonitorCore::Emit(std::vector<MirrorChange>& changes, std::vector<MonitorItem>* out) {
  const size_t first = out->size();
  AppendChangeItems(changes, neighbourEvents_, out);
  for (size_t i = first; i < out->size(); ++i) {
    if (auto* link = std::get_if<LinkItem>(&(*out)[i])) Resolve(*link->change);
  }
}

void MonitorCore::Resolve(LinkChange& change) {
  if (change.kind == ChangeKind::kRemoved) return;
  change.addrAssignType = AddrAssignTypeOf(change.link.ifindex);
}

int16_t MonitorCore::AddrAssignTypeOf(int32_t ifindex) {
  const StateMirror::Link* link = mirror_.FindLink(ifindex);
  if (!link) return kAddrAssignTypeUnknown;
  if (link->addrAssignType != kAddrAssignTypeUnread) return link->addrAssignType;
  int16_t value = kAddrAssignTypeUnknown;
  if (readAddrAssignType_ && link->record.mac.state == netlink::MacField::State::kValid) {
    if (std::optional<int> read = ReadAddrAssignType(link->record.name, ifindex,
                                                     netlink::FormatMac(link->record.mac.bytes))) {
      value = static_cast<int16_t>(*read);
    }
  }
  mirror_.SetAddrAssignType(ifindex, link->record.mac, value);
  return value;
}

void MonitorCore::ReadAvailable(size_t maxDatagrams, int64_t arrivalNs,
                                std::vector<MonitorItem>* out) {
  ++stats_.wakeups;
  const int64_t now = clock_();
  batchArrivalNs_ = arrivalNs > 0 && arrivalNs <= now ? arrivalNs : now;
  datagramArrivalNs_ = batchArrivalNs_;
  handledOne_ = false;
  const size_t first = out->size();
  Drain(maxDatagrams, out);
  RereadUnconfirmed(out, first);
}

// Reads until the socket is empty or `maxDatagrams` were read. A pending
// resync begins only once the socket is empty: the kernel reports ENOBUFS
// before the notifications still queued, and those predate the dump, so
// reading them after the dump had begun would count stale events as current.
void MonitorCore::Drain(size_t maxDatagrams, std::vector<MonitorItem>* out) {
  // Bounded in items too: a dump datagram holds hundreds of entries, and each
  // item is held (and converted for JS) until the batch is handed over.
  for (size_t count = 0; count < maxDatagrams && out->size() < kItemsPerBatch && !failed_;) {
    // Notifications come one to a datagram (a rewrite and its flush are a
    // dozen): many are read in one syscall. A dump's datagrams are full: one
    // at a time, so that the item bound holds and only one slot grows large.
    const size_t want = phase_ == Phase::kIdle ? maxDatagrams - count : 1;
    bool drained = false;
    Result<Unit> received = source_->ReceiveMany(&slots_, want, &datagrams_, &drained);
    if (!received.ok()) {
      out->push_back(FatalItem{received.error()});
      failed_ = true;
      return;
    }
    wrote_ = false;
    const int64_t readNs = clock_();
    for (size_t i = 0; i < datagrams_.size(); ++i) {
      const NetlinkSocket::Datagram& datagram = datagrams_[i];
      lookahead_.nextDatagram = i + 1;
      ++count;
      if (handledOne_) datagramArrivalNs_ = readNs;
      switch (datagram.kind) {
        case NetlinkSocket::Received::kWouldBlock:
          break;
        case NetlinkSocket::Received::kOverrun:
          ++stats_.overruns;
          NoteLostNotifications("ENOBUFS", out);
          break;
        case NetlinkSocket::Received::kTruncated:
          ++stats_.truncatedDrops;
          NoteLostNotifications("truncated", out);
          break;
        case NetlinkSocket::Received::kForeignSender:
          ++stats_.foreignSenderDrops;
          break;
        case NetlinkSocket::Received::kDatagram:
          HandleDatagram(datagram.data, datagram.length, out);
          handledOne_ = true;
          break;
      }
    }
    // Empty, unless a correction wrote meanwhile: the kernel queued its echoes
    // after this read (rtnetlink notifies inside sendmsg), so read again. (Or
    // an error stopped the read: it polls as POLLERR, and the next wake reads it.)
    if (drained && !wrote_) {
      // A correction's echoes were read by now, or lost to an overrun.
      ForgetEchoes();
      if (resyncPending_ && phase_ == Phase::kIdle) BeginResync(out);
      return;
    }
  }
  // Stopped at a bound, not at an empty socket: a pending resync still begins
  // now if nothing is left (no wake would come for it), else at the next wake.
  if (resyncPending_ && phase_ == Phase::kIdle && !failed_) {
    Result<bool> readable = source_->WaitReadable(0);
    if (readable.ok() && !readable.value()) {
      ForgetEchoes();
      BeginResync(out);
    }
  }
}

void MonitorCore::HandleDatagram(const uint8_t* data, size_t length,
                                 std::vector<MonitorItem>* out) {
  ++stats_.datagrams;
  netlink::ParseDatagramInto(data, length, &parsed_);
  lookahead_.datagram = &parsed_;
  for (size_t i = 0; i < parsed_.messages.size(); ++i) {
    lookahead_.message = i;
    HandleMessage(parsed_.messages[i], out);
  }
  lookahead_ = Lookahead{};
  if (parsed_.error) {
    ++stats_.malformed;
    // The rest of the datagram is lost; if it held dump replies, walk the table again.
    if (phase_ != Phase::kIdle) dumpInterrupted_ = true;
    out->push_back(WarningItem{
        "EBADMSG", parsed_.error->reason + " at offset " + std::to_string(parsed_.error->offset)});
  }
}

}  // namespace fg
