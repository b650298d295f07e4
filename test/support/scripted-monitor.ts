/**
 * A scripted stand-in for everything FlannelGuard talks to, with no kernel
 * and no privileges:
 *
 * - FakeKernel: the namespace's true state (links, neighbour entries, offload
 *   features) plus the queue of rtnetlink notifications its changes produce,
 *   in kernel order (a MAC change or a down: RTM_NEWLINK, then one DELNEIGH
 *   per flushed ARP/NDP entry; a features change: RTM_NEWLINK with
 *   IFLA_EVENT_FEATURES).
 * - ScriptedMonitor: the guard's own LinkMonitor over the real native core
 *   (the addon's ScriptedMonitor: mirror, restore sets, allowance, corrections),
 *   fed each notification as the bytes the kernel would send
 *   (support/netlink-bytes.ts) when the test pumps it, its dumps answered from
 *   the kernel's state when it asks, its corrections written to the kernel.
 * - FakePorts: a recording GuardPorts. Its writes change the FakeKernel at
 *   once (so the guard's verifying re-read sees them) and queue their echo
 *   notifications, which reach the guard only when the test pumps them.
 * - FakeClock: a GuardClock whose timers run only when the test advances it;
 *   the native core reads its time from it too.
 */
import {
  IFF_LOOPBACK,
  IFF_UP,
  NTF_SELF,
  NUD_NOARP,
  NUD_PERMANENT,
  NUD_REACHABLE,
} from '../../lib/core/constants';
import { systemError, type SystemError } from '../../lib/core/errors';
import type { GuardClock, GuardMonitor } from '../../lib/guard';
import { binding, type RawScriptedMonitor } from '../../lib/core/binding';
import { LinkMonitor } from '../../lib/core/monitor';
import { type LinkKernelEvent, type LinkMonitorEvents } from '../../lib/core/monitor-events';
import type { GuardPorts } from '../../lib/guard/ports';
import type { PathAnswer } from '../../lib/guard/events';
import { neighbourKey } from '../../lib/core/records';
import { delLinkMessage, linkMessage, message, neighMessage, u32 } from './netlink-bytes';
import type {
  ChecksumErrorCounters,
  ChecksumSample,
  FeatureSetResult,
  FeatureState,
  LinkInfo,
  NeighbourInfo,
} from '../../lib/core/types';

export const IFF_BROADCAST = 0x2;
export const IFF_MULTICAST = 0x1000;

/** Netlink port id of the guard's request socket: its writes come back carrying it. */
export const GUARD_PORTID = 4242;
/** Netlink port id of an `ip` command run by an operator or another agent. */
export const IP_PORTID = 7777;

// --- errors --------------------------------------------------------------------

export const enodev = (what = 'no such device'): SystemError => systemError('ENODEV', what);
export const eperm = (what = 'operation not permitted'): SystemError => systemError('EPERM', what);
export const eopnotsupp = (what = 'not supported'): SystemError => systemError('EOPNOTSUPP', what);

// --- records ---------------------------------------------------------------------

export interface LinkSpec {
  name: string;
  mac: string;
  ifindex?: number;
  up?: boolean;
  loopback?: boolean;
  kind?: string;
  mtu?: number;
}

export function makeLink(ifindex: number, spec: LinkSpec): LinkInfo {
  const up = spec.up ?? true;
  const loopback = spec.loopback ?? false;
  const kind = spec.kind ?? (loopback ? '' : 'vxlan');
  return {
    ifindex,
    name: spec.name,
    mac: spec.mac,
    flags: (up ? IFF_UP : 0) | (loopback ? IFF_LOOPBACK : IFF_BROADCAST | IFF_MULTICAST),
    up,
    loopback,
    operstate: up ? 'unknown' : 'down',
    mtu: spec.mtu ?? (kind === 'vxlan' ? 1450 : 1500),
    kind,
    vxlan:
      kind === 'vxlan'
        ? { vni: 1, port: 8472, local: '192.0.2.10', underlayIfindex: 2, learning: false }
        : null,
    master: null,
    lowerIfindex: null,
    linkNetnsid: null,
    addrAssignType: null,
  };
}

/** A permanent ARP entry, as flannel installs one per remote node. */
export function permanentArp(ifindex: number, destination: string, lladdr: string): NeighbourInfo {
  return {
    family: 'inet',
    ifindex,
    destination,
    lladdr,
    state: NUD_PERMANENT,
    states: ['permanent'],
    permanent: true,
    flags: 0,
    vni: null,
    master: null,
  };
}

/** A permanent NDP entry (flannel-v6.1). */
export function permanentNdp(ifindex: number, destination: string, lladdr: string): NeighbourInfo {
  return { ...permanentArp(ifindex, destination, lladdr), family: 'inet6' };
}

/** A learnt (non-permanent) ARP entry. */
export function reachableArp(ifindex: number, destination: string, lladdr: string): NeighbourInfo {
  return {
    ...permanentArp(ifindex, destination, lladdr),
    state: NUD_REACHABLE,
    states: ['reachable'],
    permanent: false,
  };
}

/** A permanent FDB entry (remote VTEP MAC -> underlay IP), as flannel installs one per node. */
export function permanentFdb(ifindex: number, lladdr: string, remote: string): NeighbourInfo {
  return {
    family: 'bridge',
    ifindex,
    destination: remote,
    lladdr,
    state: NUD_PERMANENT | NUD_NOARP,
    states: ['noarp', 'permanent'],
    permanent: true,
    flags: NTF_SELF,
    vni: null,
    master: null,
  };
}

function cloneLink(link: LinkInfo): LinkInfo {
  return structuredClone(link);
}

function cloneNeighbour(entry: NeighbourInfo): NeighbourInfo {
  return structuredClone(entry);
}

// --- the kernel -----------------------------------------------------------------

/** One rtnetlink notification, as the monitor socket would receive it. */
export type KernelMessage =
  | { kind: 'link'; link: LinkInfo; created: boolean; kernelEvent: LinkKernelEvent | null }
  | { kind: 'dellink'; ifindex: number }
  | { kind: 'neigh'; neighbour: NeighbourInfo; portid: number }
  | { kind: 'delneigh'; neighbour: NeighbourInfo; portid: number };

interface FeatureRow {
  available: boolean;
  fixed: boolean;
  requested: boolean;
  active: boolean;
}

/** A VXLAN device's feature table: TX checksumming on, TSO depending on it. */
function defaultFeatures(): Map<string, FeatureRow> {
  const row = (active: boolean, fixed = false): FeatureRow => ({
    available: !fixed,
    fixed,
    requested: active,
    active,
  });
  return new Map([
    ['tx-checksum-ip-generic', row(true)],
    ['tx-tcp-segmentation', row(true)],
    ['tx-tcp6-segmentation', row(true)],
    ['rx-checksum', row(true)],
    ['tx-gso-partial', row(false)],
    ['netns-local', row(false, true)],
  ]);
}

const TSO_FEATURES = ['tx-tcp-segmentation', 'tx-tcp6-segmentation'];

export class FakeKernel {
  readonly links = new Map<number, LinkInfo>();
  readonly neighbours = new Map<string, NeighbourInfo>();
  readonly features = new Map<number, Map<string, FeatureRow>>();
  /** Notifications not yet read by the (first) monitor, oldest first. */
  readonly queue: KernelMessage[] = [];
  /** The queues of further monitor sockets (another guard instance on the same namespace). */
  readonly #otherQueues: KernelMessage[][] = [];
  #nextIndex = 2;

  /** Registers a device (RTM_NEWLINK announcing a new device). */
  addLink(spec: LinkSpec): LinkInfo {
    const ifindex = spec.ifindex ?? this.#nextIndex;
    if (this.links.has(ifindex)) throw new Error(`ifindex ${ifindex} is taken`);
    this.#nextIndex = Math.max(this.#nextIndex, ifindex + 1);
    const link = makeLink(ifindex, spec);
    this.links.set(ifindex, link);
    this.features.set(ifindex, defaultFeatures());
    this.#announce(link, { created: true });
    return cloneLink(link);
  }

  link(ifindex: number): LinkInfo {
    const link = this.links.get(ifindex);
    if (!link) throw new Error(`no link ${ifindex} in the fake kernel`);
    return link;
  }

  linkByName(name: string): LinkInfo | undefined {
    for (const link of this.links.values()) if (link.name === name) return link;
    return undefined;
  }

  /** RTM_SETLINK IFLA_ADDRESS: NEWLINK, then the flush of every ARP/NDP entry of the device. */
  /** A MAC write: announced and flushing the permanent entries even when the MAC is the same. */
  setMac(ifindex: number, mac: string): void {
    const link = this.link(ifindex);
    link.mac = mac;
    link.addrAssignType = 3;
    this.#announce(link);
    this.#flushNeighbours(ifindex);
  }

  rename(ifindex: number, name: string): void {
    this.link(ifindex).name = name;
    this.#announce(this.link(ifindex));
  }

  setMtu(ifindex: number, mtu: number): void {
    this.link(ifindex).mtu = mtu;
    this.#announce(this.link(ifindex));
  }

  setOperstate(ifindex: number, operstate: LinkInfo['operstate']): void {
    this.link(ifindex).operstate = operstate;
    this.#announce(this.link(ifindex));
  }

  /** Admin up/down; a down flushes every ARP/NDP entry of the device, permanent ones included. */
  setUp(ifindex: number, up: boolean): void {
    const link = this.link(ifindex);
    if (link.up === up) return;
    link.up = up;
    link.flags = up ? link.flags | IFF_UP : link.flags & ~IFF_UP;
    link.operstate = up ? 'unknown' : 'down';
    this.#announce(link);
    if (!up) this.#flushNeighbours(ifindex);
  }

  /** Unregisters a device: it goes down first (flushing its entries), then RTM_DELLINK. */
  removeLink(ifindex: number): void {
    this.setUp(ifindex, false);
    this.links.delete(ifindex);
    this.features.delete(ifindex);
    for (const [key, entry] of this.neighbours)
      if (entry.ifindex === ifindex) this.neighbours.delete(key);
    this.#send({ kind: 'dellink', ifindex });
  }

  /** RTM_NEWNEIGH with NLM_F_CREATE|NLM_F_REPLACE. */
  replaceNeighbour(entry: NeighbourInfo, portid = IP_PORTID): void {
    if (!this.links.has(entry.ifindex)) throw enodev(`ifindex ${entry.ifindex}`);
    const key = neighbourKey(entry);
    const previous = this.neighbours.get(key);
    if (previous && JSON.stringify(previous) === JSON.stringify(entry)) return; // no change, no notification
    this.neighbours.set(key, cloneNeighbour(entry));
    this.#send({ kind: 'neigh', neighbour: cloneNeighbour(entry), portid });
  }

  /** RTM_DELNEIGH (`ip neigh del`, `bridge fdb del`). */
  deleteNeighbour(entry: NeighbourInfo, portid = IP_PORTID): void {
    const key = neighbourKey(entry);
    const previous = this.neighbours.get(key);
    if (!previous) throw systemError('ENOENT', `no neighbour ${key}`);
    this.neighbours.delete(key);
    this.#send({ kind: 'delneigh', neighbour: cloneNeighbour(previous), portid });
  }

  neighboursOf(ifindex: number): NeighbourInfo[] {
    return [...this.neighbours.values()].filter((entry) => entry.ifindex === ifindex);
  }

  featureTable(ifindex: number): FeatureState[] {
    const table = this.features.get(ifindex);
    if (!table) throw enodev(`ifindex ${ifindex}`);
    return [...table].map(([name, row]) => ({ name, ...row }));
  }

  feature(ifindex: number, name: string): boolean {
    const row = this.features.get(ifindex)?.get(name);
    if (!row) throw new Error(`no feature ${name} on ${ifindex}`);
    return row.active;
  }

  /**
   * ETHTOOL_SFEATURES as the kernel does it: the wanted bits change, dependent
   * features are recomputed, and any change is announced with IFLA_EVENT_FEATURES.
   * Returns the features whose active state changed.
   */
  setFeatures(
    ifindex: number,
    wanted: Record<string, boolean>,
  ): { name: string; before: boolean; after: boolean }[] {
    const table = this.features.get(ifindex);
    if (!table) throw enodev(`ifindex ${ifindex}`);
    const before = new Map([...table].map(([name, row]) => [name, row.active]));
    for (const [name, on] of Object.entries(wanted)) {
      const row = table.get(name);
      if (!row) throw systemError('ENODATA', `unknown feature ${name}`);
      if (row.fixed) throw eopnotsupp(`${name} is fixed`);
      row.requested = on;
    }
    const csum = table.get('tx-checksum-ip-generic');
    for (const [name, row] of table) {
      if (row.fixed) continue;
      row.active = TSO_FEATURES.includes(name)
        ? row.requested && (csum?.requested ?? false)
        : row.requested;
    }
    const changed = [...table]
      .filter(([name, row]) => before.get(name) !== row.active)
      .map(([name, row]) => ({ name, before: before.get(name) ?? false, after: row.active }));
    if (changed.length > 0) this.#announce(this.link(ifindex), { kernelEvent: 'features' });
    return changed;
  }

  /** Another agent (a udev RUN rule, `ethtool -K`) turns one feature on or off. */
  setFeature(ifindex: number, name: string, on: boolean): void {
    this.setFeatures(ifindex, { [name]: on });
  }

  /** Opens another notification queue that receives every notification from now on. */
  openQueue(): KernelMessage[] {
    const queue: KernelMessage[] = [];
    this.#otherQueues.push(queue);
    return queue;
  }

  /** Forgets every queued notification (the kernel dropped them: ENOBUFS). Returns how many. */
  loseQueued(queue: KernelMessage[] = this.queue): number {
    return queue.splice(0).length;
  }

  #send(message: KernelMessage): void {
    this.queue.push(message);
    for (const queue of this.#otherQueues) queue.push(structuredClone(message));
  }

  #announce(
    link: LinkInfo,
    options: { created?: boolean; kernelEvent?: LinkKernelEvent | null } = {},
  ): void {
    this.#send({
      kind: 'link',
      link: cloneLink(link),
      created: options.created ?? false,
      kernelEvent: options.kernelEvent ?? null,
    });
  }

  #flushNeighbours(ifindex: number): void {
    for (const [key, entry] of this.neighbours) {
      if (entry.ifindex !== ifindex || entry.family === 'bridge') continue;
      this.neighbours.delete(key);
      this.#send({ kind: 'delneigh', neighbour: cloneNeighbour(entry), portid: 0 });
    }
  }
}

// --- the monitor ----------------------------------------------------------------

/** Every event the monitor emitted, in order (for re-emitting one, or checking order). */
export type EmittedEvent = {
  [Name in keyof LinkMonitorEvents]: { type: Name; args: LinkMonitorEvents[Name] };
}[keyof LinkMonitorEvents];

/** Netlink port id of the monitor's socket: its dump replies are addressed to it. */
export const MONITOR_PORTID = 4141;
/** Netlink port id of the native layer's write socket: its corrections' echoes name it. */
export const NATIVE_PORTID = 4343;

const NLM_F_MULTI = 0x2;
const NLMSG_DONE = 3;
const RTM_GETLINK = 18;
const AF_BRIDGE = 7;

/** A notification's bytes as the reply to dump request `seq` of the monitor's socket. */
function asDumpReply(datagram: Buffer, seq: number): Buffer {
  const reply = Buffer.from(datagram);
  reply.writeUInt16LE(reply.readUInt16LE(6) | NLM_F_MULTI, 6);
  reply.writeUInt32LE(seq, 8);
  reply.writeUInt32LE(MONITOR_PORTID, 12);
  return reply;
}

function ipText(bytes: Buffer): string {
  if (bytes.length === 4) return [...bytes].join('.');
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16));
  return groups.join(':').replace(/(^|:)0(:0)+(:|$)/, '::');
}

const macText = (bytes: Buffer): string =>
  [...bytes].map((byte) => byte.toString(16).padStart(2, '0')).join(':');

/** The bytes the kernel sends for a notification. */
function messageBytes(
  kernel: FakeKernel,
  message: KernelMessage,
  names: Map<number, string>,
): Buffer {
  switch (message.kind) {
    case 'link':
      names.set(message.link.ifindex, message.link.name);
      return linkMessage(message.link, {
        created: message.created,
        kernelEvent: message.kernelEvent,
      });
    case 'dellink':
      return delLinkMessage(message.ifindex, names.get(message.ifindex) ?? '');
    case 'neigh':
    case 'delneigh':
      return neighMessage(message.neighbour, message.kind === 'delneigh', message.portid);
  }
}

/**
 * The fake kernel as the native layer's writer sees it: its corrections go to the kernel
 * (which queues their notifications), recorded in `writes`.
 */
function writerScript(
  kernel: FakeKernel,
  writes: NativeWrite[],
  answer: (request: Buffer) => void,
  unfed: () => boolean,
): ConstructorParameters<typeof binding.ScriptedMonitor>[1] {
  return {
    answer,
    unfed,
    getLink: (ifindex) => {
      const link = kernel.links.get(ifindex);
      return link === undefined ? null : linkMessage(link);
    },
    setLinkAddress: (ifindex, mac) => {
      writes.push({ method: 'setLinkMac', ifindex, mac: macText(mac) });
      kernel.setMac(ifindex, macText(mac));
    },
    replaceNeighbour: (entry) => {
      const destination = ipText(entry.destination);
      const lladdr = macText(entry.lladdr);
      const written =
        entry.family === 10
          ? permanentNdp(entry.ifindex, destination, lladdr)
          : permanentArp(entry.ifindex, destination, lladdr);
      writes.push({ method: 'replaceNeighbour', entry: written });
      kernel.replaceNeighbour(
        { ...written, state: entry.state, flags: entry.flags },
        NATIVE_PORTID,
      );
    },
  };
}

export type NativeWrite =
  | { method: 'setLinkMac'; ifindex: number; mac: string }
  | { method: 'replaceNeighbour'; entry: NeighbourInfo };

/**
 * The guard's LinkMonitor itself, with its options, over the real native core (the addon's
 * ScriptedMonitor): its input is the fake kernel's notifications, delivered when the test
 * pumps them, and the dumps it asks for, answered from the fake kernel's state. With
 * `corrections`, the core makes the armed corrections itself, writing to the fake kernel
 * (`nativeWrites`); without, arm() arms nothing and the guard corrects through its ports.
 */
export class ScriptedMonitor extends LinkMonitor implements GuardMonitor {
  readonly kernel: FakeKernel;
  /** The notifications this monitor's socket has not read yet. */
  readonly queue: KernelMessage[];
  readonly emitted: EmittedEvent[] = [];
  /** The native layer's writes (its corrections), in order. */
  readonly nativeWrites: NativeWrite[];
  refs = 0;
  unrefs = 0;
  closeCalls = 0;
  readonly #raw: RawScriptedMonitor;
  readonly #names = new Map<number, string>();

  constructor(
    kernel: FakeKernel,
    options: { queue?: KernelMessage[]; corrections?: boolean; clock?: GuardClock } = {},
  ) {
    let raw: RawScriptedMonitor | undefined;
    const writes: NativeWrite[] = [];
    // Dumps are answered when asked (from the kernel's state then), once the monitor exists.
    const answering: { to?: (request: Buffer) => void } = {};
    // What this monitor's socket holds unread (a notification is queued there before the
    // write that caused it returns).
    const queue = options.queue ?? kernel.queue;
    // As the guard opens its monitor (lib/guard/parts.ts).
    super(
      { neighbours: 'ip', neighbourEvents: 'permanent', addrAssignType: false },
      (rawOptions, onBatch) => {
        raw = new binding.ScriptedMonitor(
          {
            ...rawOptions,
            portid: MONITOR_PORTID,
            writerPortid: NATIVE_PORTID,
            corrections: options.corrections ?? false,
            ...(options.clock ? { clock: options.clock.now.bind(options.clock) } : {}),
          },
          writerScript(
            kernel,
            writes,
            (request) => answering.to?.(request),
            () => queue.length > 0,
          ),
          onBatch,
        );
        return raw;
      },
    );
    if (!raw) throw new Error('LinkMonitor opened no native monitor');
    this.#raw = raw;
    this.kernel = kernel;
    this.queue = queue;
    this.nativeWrites = writes;
    answering.to = (request) => {
      this.#answer(request);
    };
  }

  /** Corrections the native layer made (its MAC writes). */
  get corrections(): number {
    return this.nativeWrites.filter((write) => write.method === 'setLinkMac').length;
  }

  /** What the native core has the device armed with, and the restore set it keeps. */
  armed(ifindex: number): { name: string; mac: string; neighbours: string[] } | undefined {
    return this.#raw.armed(ifindex);
  }

  override ref(): this {
    this.refs += 1;
    return super.ref();
  }

  override unref(): this {
    this.unrefs += 1;
    return super.unref();
  }

  override close(): void {
    this.closeCalls += 1;
    super.close();
  }

  override emit<Name extends keyof LinkMonitorEvents>(
    name: Name,
    ...args: LinkMonitorEvents[Name]
  ): boolean {
    (this.emitted as EmittedEvent[] | undefined)?.push({ type: name, args } as EmittedEvent);
    return (super.emit as (name: string, ...args: unknown[]) => boolean)(name, ...args);
  }

  /**
   * The initial dump: the kernel's current state becomes the snapshot without
   * per-object events (notifications queued so far are part of the dump), then `ready`.
   */
  start(): void {
    if (this.isReady) throw new Error('already started');
    this.kernel.loseQueued(this.queue);
    this.#read();
  }

  /** Delivers the oldest queued notification; false when there was none. */
  pumpOne(): boolean {
    const message = this.queue.shift();
    if (!message) return false;
    this.deliver(message);
    return true;
  }

  /** Delivers every queued notification in one read, as a socket holding them all does. */
  pumpTogether(): void {
    if (this.closed) return;
    for (const message of this.queue.splice(0)) {
      this.#raw.feed(messageBytes(this.kernel, message, this.#names));
    }
    this.#read();
  }

  /**
   * Delivers queued notifications, including those the guard's reactions
   * queue, until none is left. Throws when more than `limit` are delivered: a
   * write/echo loop.
   */
  pump(limit = 500): number {
    let delivered = 0;
    this.#read();
    while (this.pumpOne()) {
      delivered += 1;
      if (delivered > limit) throw new Error(`more than ${limit} notifications: a write/echo loop`);
    }
    return delivered;
  }

  deliver(message: KernelMessage): void {
    if (this.closed) return;
    this.#raw.feed(messageBytes(this.kernel, message, this.#names));
    this.#read();
  }

  /**
   * Lost notifications (ENOBUFS): the queued ones are dropped, and the native core reports the
   * overrun and re-dumps, as it does on a socket.
   */
  overrunAndResync(): void {
    this.kernel.loseQueued(this.queue);
    this.#raw.overrun();
    this.#read();
  }

  /** Reads what is queued (the dumps the core asks for are answered as it asks). */
  #read(): void {
    if (!this.closed) this.#raw.read();
  }

  #answer(request: Buffer): void {
    const type = request.readUInt16LE(4);
    const seq = request.readUInt32LE(8);
    const family = request[16];
    if (type === RTM_GETLINK) {
      for (const link of this.kernel.links.values()) {
        this.#names.set(link.ifindex, link.name);
        this.#raw.feed(asDumpReply(linkMessage(link), seq));
      }
    } else {
      for (const entry of this.kernel.neighbours.values()) {
        if ((entry.family === 'bridge') !== (family === AF_BRIDGE)) continue;
        this.#raw.feed(asDumpReply(neighMessage(entry), seq));
      }
    }
    this.#raw.feed(message(NLMSG_DONE, u32(0), NLM_F_MULTI, seq, MONITOR_PORTID));
  }
}

// --- the ports --------------------------------------------------------------------

export type PortCall =
  | { method: 'getLink'; ifindex: number }
  | { method: 'setLinkMac'; ifindex: number; mac: string; name: string }
  | { method: 'replaceNeighbour'; entry: NeighbourInfo; name: string }
  | { method: 'deleteNeighbour'; entry: NeighbourInfo; name: string }
  | { method: 'getFeatures'; name: string }
  | { method: 'setFeatures'; name: string; wanted: Record<string, boolean> }
  | { method: 'addrAssignType'; ifindex: number }
  | { method: 'probeWriteAccess' }
  | { method: 'checksumErrors' }
  | { method: 'probePaths'; name: string; addresses: readonly string[] }
  | { method: 'sampleChecksums'; name: string }
  | { method: 'forwardingEntries'; ifindex: number }
  | { method: 'close' };

export type PortMethod = PortCall['method'];

const WRITE_METHODS: readonly PortMethod[] = [
  'setLinkMac',
  'replaceNeighbour',
  'deleteNeighbour',
  'setFeatures',
];

/** A recording GuardPorts over a FakeKernel, with scripted failures and races. */
export class FakePorts implements GuardPorts {
  readonly kernel: FakeKernel;
  readonly calls: PortCall[] = [];
  #faults = new Map<PortMethod, { error: Error; times: number }>();
  #hooks = new Map<PortMethod, () => void>();

  constructor(kernel: FakeKernel) {
    this.kernel = kernel;
  }

  /** The next `times` calls of `method` throw `error` (before doing anything). */
  fail(method: PortMethod, error: Error, times = 1): void {
    this.#faults.set(method, { error, times });
  }

  /** Runs `hook` once, right before the next call of `method` (a race with another agent). */
  before(method: PortMethod, hook: () => void): void {
    this.#hooks.set(method, hook);
  }

  clear(): void {
    this.calls.length = 0;
  }

  /**
   * The methods called, in order, leaving out the addrAssignType reads `status()` makes and the
   * checksum-error counters read on a timer.
   */
  methods(): PortMethod[] {
    return this.calls
      .map((call) => call.method)
      .filter((method) => method !== 'addrAssignType' && method !== 'checksumErrors');
  }

  writes(): PortCall[] {
    return this.calls.filter((call) => WRITE_METHODS.includes(call.method));
  }

  macWrites(): Extract<PortCall, { method: 'setLinkMac' }>[] {
    return this.calls.filter(
      (call): call is Extract<PortCall, { method: 'setLinkMac' }> => call.method === 'setLinkMac',
    );
  }

  neighbourWrites(): Extract<PortCall, { method: 'replaceNeighbour' }>[] {
    return this.calls.filter(
      (call): call is Extract<PortCall, { method: 'replaceNeighbour' }> =>
        call.method === 'replaceNeighbour',
    );
  }

  featureWrites(): Extract<PortCall, { method: 'setFeatures' }>[] {
    return this.calls.filter(
      (call): call is Extract<PortCall, { method: 'setFeatures' }> => call.method === 'setFeatures',
    );
  }

  getLink(ifindex: number): LinkInfo | null {
    this.#enter({ method: 'getLink', ifindex });
    const link = this.kernel.links.get(ifindex);
    return link ? cloneLink(link) : null;
  }

  setLinkMac(ifindex: number, mac: string, name: string): void {
    this.#enter({ method: 'setLinkMac', ifindex, mac, name });
    if (!this.kernel.links.has(ifindex)) throw enodev(`setlink ${name} (ifindex ${ifindex})`);
    this.kernel.setMac(ifindex, mac);
  }

  /** Recorded as one `replaceNeighbour` call per entry, each of which may fail. */
  replaceNeighbours(entries: readonly NeighbourInfo[], name: string): number {
    for (const entry of entries) {
      this.#enter({ method: 'replaceNeighbour', entry: cloneNeighbour(entry), name });
      this.kernel.replaceNeighbour(entry, GUARD_PORTID);
    }
    return entries.length;
  }

  deleteNeighbour(entry: NeighbourInfo, name: string): void {
    this.#enter({ method: 'deleteNeighbour', entry: cloneNeighbour(entry), name });
    this.kernel.deleteNeighbour(entry, GUARD_PORTID);
  }

  getFeatures(name: string): FeatureState[] {
    this.#enter({ method: 'getFeatures', name });
    return this.kernel.featureTable(this.#ifindexOf(name));
  }

  setFeatures(name: string, wanted: Record<string, boolean>): FeatureSetResult {
    this.#enter({ method: 'setFeatures', name, wanted: { ...wanted } });
    const ifindex = this.#ifindexOf(name);
    const requested = Object.keys(wanted);
    const before = new Map(this.kernel.featureTable(ifindex).map((f) => [f.name, f.active]));
    const written = requested.some((feature) => before.get(feature) !== wanted[feature]);
    const changed = written ? this.kernel.setFeatures(ifindex, wanted) : [];
    const active = Object.fromEntries(requested.map((f) => [f, this.kernel.feature(ifindex, f)]));
    return {
      interface: name,
      written,
      legacy: false,
      requested: { ...wanted },
      active,
      sideEffects: changed.filter((change) => !requested.includes(change.name)),
      notApplied: requested.filter((f) => active[f] !== wanted[f]),
    };
  }

  addrAssignType(link: LinkInfo): number | null {
    this.#enter({ method: 'addrAssignType', ifindex: link.ifindex });
    return this.kernel.links.get(link.ifindex)?.addrAssignType ?? null;
  }

  probeWriteAccess(): void {
    this.#enter({ method: 'probeWriteAccess' });
  }

  /** The namespace's checksum-error counters, as a test sets them. */
  readonly checksumErrorCounters = { udp: 0, tcp: 0, udp6: 0 };

  checksumErrors(): ChecksumErrorCounters {
    this.#enter({ method: 'checksumErrors' });
    return { ...this.checksumErrorCounters };
  }

  /**
   * How the scripted peers answer a probe round; the default: every path answers everything.
   * A test replaces it (with the device's features in the FakeKernel, say).
   */
  answerProbe: (name: string, address: string) => Omit<PathAnswer, 'address'> = () => ({
    echo: true,
    udp: true,
    tcp: true,
  });

  probePaths(name: string, addresses: readonly string[]): Promise<PathAnswer[]> {
    return this.#settle({ method: 'probePaths', name, addresses: [...addresses] }, () =>
      addresses.map((address) => ({ address, ...this.answerProbe(name, address) })),
    );
  }

  /** An asynchronous port: its scripted failure rejects, as the real one's would. */
  #settle<T>(call: PortCall, answer: () => T): Promise<T> {
    try {
      this.#enter(call);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    return Promise.resolve(answer());
  }

  /** What a sample of the packets arriving on a device finds, as a test sets it. */
  checksumSample: ChecksumSample = { frames: 0, checked: 0, bad: 0, senders: [] };

  sampleChecksums(name: string): Promise<ChecksumSample> {
    return this.#settle({ method: 'sampleChecksums', name }, () =>
      structuredClone(this.checksumSample),
    );
  }

  /** The kernel's FDB entries on the device. */
  forwardingEntries(ifindex: number): Promise<NeighbourInfo[]> {
    return this.#settle({ method: 'forwardingEntries', ifindex }, () =>
      [...this.kernel.neighbours.values()]
        .filter((entry) => entry.family === 'bridge' && entry.ifindex === ifindex)
        .map(cloneNeighbour),
    );
  }

  close(): void {
    this.#enter({ method: 'close' });
  }

  #ifindexOf(name: string): number {
    const link = this.kernel.linkByName(name);
    if (!link) throw enodev(name);
    return link.ifindex;
  }

  #enter(call: PortCall): void {
    this.calls.push(call);
    const hook = this.#hooks.get(call.method);
    if (hook) {
      this.#hooks.delete(call.method);
      hook();
    }
    const fault = this.#faults.get(call.method);
    if (fault) {
      fault.times -= 1;
      if (fault.times <= 0) this.#faults.delete(call.method);
      throw fault.error;
    }
  }
}

// --- the clock ----------------------------------------------------------------------

interface Timer {
  id: number;
  due: number;
  callback: () => void;
}

/** A GuardClock whose timers fire only from `advance`, in due order. */
export class FakeClock implements GuardClock {
  #now: number;
  #timers: Timer[] = [];
  #nextId = 1;

  constructor(start = 1_000) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(callback: () => void, ms: number): () => void {
    const timer: Timer = { id: this.#nextId++, due: this.#now + ms, callback };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Delays (from now) of the pending timers, soonest first. */
  pending(): number[] {
    return this.#timers.map((t) => t.due - this.#now).sort((a, b) => a - b);
  }

  /** Moves time forward, running each timer that falls due at its own instant. */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (;;) {
      const next = [...this.#timers]
        .filter((t) => t.due <= target)
        .sort((a, b) => a.due - b.due || a.id - b.id)[0];
      if (!next) break;
      this.#timers = this.#timers.filter((t) => t !== next);
      this.#now = Math.max(this.#now, next.due);
      next.callback();
    }
    this.#now = target;
  }
}
