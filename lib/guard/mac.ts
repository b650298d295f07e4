/**
 * MAC correction: a managed device's MAC leaving its desired value is a rewrite; fight
 * control decides whether to set it back now, later or not at all, and the permanent
 * neighbour entries the change flushed go back with it. When policy allows a correction
 * now, the native layer is armed to make it in the read that sees the drift; JavaScript
 * then accounts for it, as for one it makes itself.
 */
import { systemError } from '../core/errors';
import { MAX_ALLOWANCE_LIMIT } from '../core/monitor';
import { type NativeCorrection } from '../core/monitor-events';
import { neighbourKey } from '../core/records';
import type { LinkInfo } from '../core/types';
import type { GuardConfig } from './config';
import type { GuardContext } from './context';
import type { GuardMonitor } from './seams';
import type { GuardPorts } from './ports';
import type { DesiredMac, ManagedDevice } from './device';
import type { RewriteFound } from './events';
import { attributeWriter, type WriterAttribution } from '../udev/writer';
import type { FightActions, FightKey } from './fight-control';
import type { FightDecision } from './fight-tracker';

/** Where a MAC change was seen: a notification, a re-dump, or taking the device on. */
export type MacChangeOrigin = RewriteFound;

const FOUND: Record<RewriteFound, string> = {
  event: '',
  resync: ' (found when re-reading the namespace after lost notifications)',
  start: ' (found when the guard began managing the device)',
};

function macKey(device: ManagedDevice): FightKey {
  return { what: 'mac', device };
}

/**
 * What MAC correction may touch: it writes a device's MAC and its ARP/NDP entries (nothing else
 * of the kernel's), arms the native layer, and reads the rest.
 */
export type MacCorrectionContext = Omit<GuardContext, 'config' | 'monitor' | 'ports'> & {
  readonly config: Pick<GuardConfig, 'dryRun' | 'source' | 'strategy'>;
  readonly monitor: Pick<
    GuardMonitor,
    'arm' | 'disarm' | 'neighbours' | 'restoreSet' | 'rewrittenLater'
  >;
  readonly ports: Pick<
    GuardPorts,
    'getLink' | 'setLinkMac' | 'replaceNeighbours' | 'addrAssignType'
  >;
};

export class MacCorrection {
  readonly #ctx: MacCorrectionContext;
  /** Devices whose flush is to be answered once the batch that carried it is handled. */
  readonly #flushed = new Set<ManagedDevice>();

  constructor(context: MacCorrectionContext) {
    this.#ctx = context;
  }

  /** The device's fight over its MAC is contested. */
  isContested(device: ManagedDevice): boolean {
    return this.#ctx.fight.isContested(macKey(device));
  }

  /**
   * Arms the native layer to answer the device's drifts in the read that sees
   * each - the MAC set back and the kept neighbours re-added before JS runs -
   * as long as policy would correct them at once (fight control's allowance);
   * disarms it when policy allows none now. Called after every change to what
   * that decision depends on.
   */
  arm(device: ManagedDevice): void {
    const { monitor, config, devices, fight } = this.#ctx;
    const desired = devices.desiredMac(device);
    const key = macKey(device);
    const allowance = fight.allowance(key, MAX_ALLOWANCE_LIMIT);
    const allowed =
      !config.dryRun &&
      devices.isWritable(device) &&
      desired !== null &&
      !(config.strategy === 'adopt' && desired.kind === 'source') &&
      !fight.heldBack(key) &&
      allowance !== null;
    if (!allowed) {
      monitor.disarm(device.ifindex);
      return;
    }
    monitor.arm(device.ifindex, { name: device.name, mac: desired.mac, allowance });
  }

  /**
   * The device's MAC is `link.mac` now (it was `previous`), as seen at `at`: back at the
   * desired value, or a rewrite to report and answer. `correction`: what the native layer
   * already did about it.
   */
  changed(
    device: ManagedDevice,
    link: LinkInfo,
    previous: string | null,
    origin: MacChangeOrigin,
    at: number,
    correction?: NativeCorrection,
  ): void {
    const { config, counters, devices, fight } = this.#ctx;
    const desired = devices.desiredMac(device);
    if (!desired) return;
    if (link.mac === desired.mac) {
      // Back at the desired value: our own write's echo, or someone else's fix.
      const due = device.answerDue;
      this.#backAtDesired(device);
      if (due) this.#restored(device, desired.mac, due.neighbours, at - due.since, false);
      return;
    }
    device.driftSince ??= at;
    device.answerDue = null; // this rewrite's answer comes after both
    device.sourceNewer = false; // the device's MAC is the newer answer again
    counters.rewrites += 1;
    device.rewrites += 1;
    const sinceCreation = device.createdAt === null ? null : at - device.createdAt;
    const { writer, evidence, detail } = this.#attribute(link, sinceCreation, origin);
    this.#ctx.emit('rewrite', {
      device: device.name,
      ifindex: device.ifindex,
      expected: desired.mac,
      mac: link.mac,
      previous,
      writer,
      evidence,
      found: origin,
      detail: detail + FOUND[origin],
      msSinceCreation: sinceCreation,
      dryRun: config.dryRun,
    });
    if (config.dryRun) return;
    const key = macKey(device);
    const decision = fight.record(key, at);
    const observed = link.mac ?? 'none';
    if (correction) {
      this.#afterNativeCorrection(device, desired, observed, at, correction, decision);
      return;
    }
    fight.act(key, decision, this.#answer(device, desired, observed));
  }

  /** Who wrote `link.mac`: udev, proven by its own computation, or someone else. */
  #attribute(
    link: LinkInfo,
    msSinceCreation: number | null,
    origin: MacChangeOrigin,
  ): WriterAttribution {
    const { udev, ports } = this.#ctx;
    const expectation = udev?.expect(link.name, link.ifindex, link.mac) ?? {
      persistentMac: null,
      machineId: 'not read (option udevRoot false)',
      linkFile: null,
      linkFileFrom: null,
      policy: null,
      macAddress: null,
    };
    const udevValue = link.mac !== null && link.mac === expectation.persistentMac;
    // Spelled out: in Node 20's V8, a literal that begins with a spread and adds properties
    // builds new hidden classes on every call (~5 us each here, more than all the rest of it).
    return attributeWriter({
      persistentMac: expectation.persistentMac,
      machineId: expectation.machineId,
      linkFile: expectation.linkFile,
      linkFileFrom: expectation.linkFileFrom,
      policy: expectation.policy,
      macAddress: expectation.macAddress,
      mac: link.mac,
      msSinceCreation,
      // A sysfs read costs more than the rest of the correction's JavaScript: it is made for a
      // change found after the fact, not on a live rewrite's path (where a userspace write
      // always leaves 3), and never for udev's proven value.
      addrAssignType: udevValue || origin === 'event' ? null : ports.addrAssignType(link),
    });
  }

  /** What fight control does for this rewrite: correct (or adopt), or report the contest. */
  #answer(device: ManagedDevice, desired: DesiredMac, observed: string): FightActions {
    const { config } = this.#ctx;
    return {
      correct: (deferred, at) => {
        const adopt = config.strategy === 'adopt' && desired.kind === 'source';
        if (adopt && !device.sourceNewer) this.#adopt(device, at);
        else this.#correct(device, deferred, at);
      },
      contested: (rewrites) => {
        const { windowMs, quietMs } = this.#ctx.fight.policy;
        return {
          what: 'mac',
          expected: desired.mac,
          observed,
          rewrites,
          detail: `${device.name} rewritten ${rewrites} times within ${windowMs} ms (now ${observed}, expected ${desired.mac}): another agent is setting its MAC; correcting stops until it has been quiet for ${quietMs} ms`,
        };
      },
    };
  }

  /** A source changed its answers: bring the device to them (not counted as a rewrite). */
  reconcile(device: ManagedDevice, at: number): void {
    const { devices, fight } = this.#ctx;
    if (devices.isDrifted(device)) {
      if (!fight.heldBack(macKey(device))) this.#correct(device, false, at);
      else if (!isOwnAdoption(device, devices.desiredMac(device)?.mac)) device.sourceNewer = true;
    }
    this.arm(device); // the desired MAC itself may have changed
  }

  /**
   * After a re-dump or with the MAC right at start: puts back kept entries the kernel lacks.
   * Returns how many entries it wrote.
   */
  restoreMissing(device: ManagedDevice): number {
    const { config, monitor } = this.#ctx;
    if (config.dryRun) return 0;
    const present = new Set(monitor.neighbours({ ifindex: device.ifindex }).map(neighbourKey));
    const kept = monitor.restoreSet(device.ifindex);
    if (kept.every((entry) => present.has(neighbourKey(entry)))) return 0;
    return this.#restoreOnTarget(device);
  }

  /**
   * The kernel flushed kept entries (any MAC write flushes, even of the MAC the device has:
   * another writer's, another guard's correction). Once the batch that carried the flush is
   * handled, a device at its desired MAC and up gets them back; a drifted one gets them
   * with its correction, a down one once it is up.
   */
  afterFlush(device: ManagedDevice): void {
    if (this.#ctx.config.dryRun || this.#flushed.has(device)) return;
    this.#flushed.add(device);
    queueMicrotask(() => {
      this.#flushed.delete(device);
      const { devices } = this.#ctx;
      if (this.#ctx.isClosed() || device.vanishing || devices.get(device.ifindex) !== device)
        return;
      if (!devices.currentLink(device)?.up || devices.isDrifted(device)) return;
      try {
        this.restoreMissing(device);
      } catch (error) {
        this.#ctx.fail(error);
      }
    });
  }

  /** The kernel flushes permanent entries when a device goes down: put them back once it is up. */
  restoreAfterUp(device: ManagedDevice): void {
    if (this.#ctx.config.dryRun) return;
    if (this.#ctx.monitor.restoreSet(device.ifindex).length === 0) return;
    this.#restoreOnTarget(device);
  }

  #restoreOnTarget(device: ManagedDevice): number {
    const { devices } = this.#ctx;
    let restored = 0;
    devices.attempt(device, () => {
      if (devices.writeTarget(device)) restored = this.#restoreNeighbours(device);
    });
    return restored;
  }

  #backAtDesired(device: ManagedDevice): void {
    this.#ctx.counters.echoes += 1;
    device.driftSince = null;
    device.sourceNewer = false;
    this.#ctx.fight.cancelDeferred(macKey(device));
  }

  /**
   * The native layer has answered the drift already (it was armed because
   * policy allowed a correction now): account for it as the correction the
   * decision called for, and verify it.
   */
  #afterNativeCorrection(
    device: ManagedDevice,
    desired: DesiredMac,
    observed: string,
    at: number,
    correction: NativeCorrection,
    decision: FightDecision,
  ): void {
    const { counters, devices, fight } = this.#ctx;
    if (correction.error) {
      if (correction.error.code === 'ENODEV') devices.vanish(device);
      else this.#ctx.fail(correction.error);
      return;
    }
    counters.writes += 1 + correction.neighbours;
    counters.neighboursRestored += correction.neighbours;
    // `at` is the notification's arrival; the native layer timed the rest from there.
    const latencyMs = at - (device.driftSince ?? at) + correction.queuedMs + correction.doneMs;
    this.#restored(device, desired.mac, correction.neighbours, latencyMs, false);
    if (decision.action === 'contested') {
      // Armed before this rewrite made the fight a contest: alert, stop from now on, and
      // correct once the key has been quiet (the other writer's MAC may be back by then).
      fight.act(macKey(device), decision, this.#answer(device, desired, observed));
    }
    // The write's own notification, when folded into this change, is the echo that follows.
    if (correction.echoed) this.#backAtDesired(device);
    this.#verify(device, desired.mac, correction.after);
  }

  /**
   * One account of a correction, whichever layer made it: counted, and reported with its
   * latency from the drift's first notification (RestoredEvent.latencyMs).
   */
  #restored(
    device: ManagedDevice,
    mac: string,
    neighbours: number,
    latencyMs: number,
    deferred: boolean,
  ): void {
    const { counters } = this.#ctx;
    // The drift ends with its correction: the next one is timed from its own first notification.
    device.driftSince = null;
    device.answerDue = null;
    counters.corrections += 1;
    if (deferred) counters.deferredCorrections += 1;
    this.#ctx.emit('restored', {
      device: device.name,
      ifindex: device.ifindex,
      mac,
      neighbours,
      latencyMs,
      deferred,
    });
  }

  /**
   * Checks the device as re-read after a correction. A MAC other than the one
   * written is a new rewrite, whose own event follows; only losing the device
   * or its name is an error.
   */
  #verify(device: ManagedDevice, desired: string, after: { name: string } | null): void {
    if (after && after.name === device.name) return;
    throw systemError(
      'EIO',
      `${device.name} changed under its correction to ${desired} (re-read: ${after ? `now ${after.name}` : 'gone'})`,
      { interface: device.name, ifindex: device.ifindex },
    );
  }

  /** Verifies the write target, then MAC, neighbours and a re-read. */
  #correct(device: ManagedDevice, deferred: boolean, at: number): void {
    const { devices, ports, counters, clock } = this.#ctx;
    if (!devices.isWritable(device)) return;
    devices.attempt(device, () => {
      const target = devices.writeTarget(device);
      // Desired after the target check: a rename within the globs may change it.
      const desired = devices.desiredMac(device);
      if (!target || !desired) return;
      if (target.mac === desired.mac) {
        // Put back already (an earlier correction answered this drift too, or another writer):
        // the entries its MAC changes flushed may not be (a contest held the correction back
        // while they were flushed, and no write of ours will flush them again).
        const since = device.driftSince;
        this.#backAtDesired(device);
        const neighbours = this.restoreMissing(device);
        // A rewrite reported and not answered: set back by a write of ours that landed after it
        // (it came between the guard's re-read and its write: udev's, while the guard waited for
        // RTNL) or by the native correction of a later rewrite in this batch. Answered now, or
        // when the batch's later change is handled (never before a rewrite it set back).
        if (since !== null) {
          if (this.#ctx.monitor.rewrittenLater(device.ifindex)) {
            device.answerDue = { since, neighbours };
          } else {
            this.#restored(device, desired.mac, neighbours, clock.now() - since, deferred);
          }
        }
        return;
      }
      if (
        target.mac !== devices.currentLink(device)?.mac ||
        this.#ctx.monitor.rewrittenLater(device.ifindex)
      ) {
        // Rewritten again since the event being handled (or, from a timer, since the last one
        // read): that rewrite is in this batch or queued. Answered when it is handled, the
        // correction is reported after it, never before (the arming below lets the native
        // layer answer it as it is read).
        return;
      }
      // The native reader sees this write the moment it is made: armed for another MAC (the
      // desired one has just changed), it would take the write for a rewrite.
      this.arm(device);
      ports.setLinkMac(device.ifindex, desired.mac, device.name);
      counters.writes += 1;
      const restored = this.#restoreNeighbours(device);
      const latencyMs = clock.now() - (device.driftSince ?? at);
      this.#verify(device, desired.mac, ports.getLink(device.ifindex));
      this.#restored(device, desired.mac, restored, latencyMs, deferred);
    });
    this.arm(device);
  }

  /**
   * The 'adopt' strategy: keep the device's MAC, put back the neighbour
   * entries its change flushed, and have the source publish the MAC.
   */
  #adopt(device: ManagedDevice, at: number): void {
    const { config, devices, clock } = this.#ctx;
    const source = config.source;
    const desired = devices.desiredMac(device);
    if (!source?.adopt || !desired || device.vanishing) return;
    const adopt = source.adopt.bind(source);
    devices.attempt(device, () => {
      const target = devices.writeTarget(device);
      if (!target?.mac || target.mac === desired.mac) return;
      const mac = target.mac;
      const { adoptions } = device;
      adoptions.inFlight.push(mac);
      const settled = (): void => {
        adoptions.inFlight.splice(adoptions.inFlight.indexOf(mac), 1);
      };
      const neighbours = this.#restoreNeighbours(device);
      const since = device.driftSince ?? at;
      adopt(device.name, mac).then(
        () => {
          settled();
          adoptions.stored = mac;
          if (this.#ctx.isClosed()) return;
          device.driftSince = null;
          this.#ctx.emit('adopted', {
            device: device.name,
            ifindex: device.ifindex,
            mac,
            previous: desired.mac,
            neighbours,
            latencyMs: clock.now() - since,
          });
        },
        (error: unknown) => {
          settled();
          this.#ctx.fail(error);
        },
      );
    });
  }

  /** Re-installs the device's restore set (replace is idempotent). Returns how many. */
  #restoreNeighbours(device: ManagedDevice): number {
    const kept = this.#ctx.monitor.restoreSet(device.ifindex);
    const restored = kept.length === 0 ? 0 : this.#ctx.ports.replaceNeighbours(kept, device.name);
    this.#ctx.counters.writes += restored;
    this.#ctx.counters.neighboursRestored += restored;
    return restored;
  }
}

/** Whether `mac`, the source's answer for the device, is one of this guard's own adoptions. */
function isOwnAdoption(device: ManagedDevice, mac: string | undefined): boolean {
  const { inFlight, stored } = device.adoptions;
  return mac !== undefined && (mac === stored || inFlight.includes(mac));
}
