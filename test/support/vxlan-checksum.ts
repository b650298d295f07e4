/**
 * Inner checksum counting on the wire: capture VXLAN (UDP 8472) on a node's underlay with
 * tcpdump, parse the classic pcap in TypeScript (Ethernet → IPv4 → UDP 8472 → VXLAN → inner
 * Ethernet → IPv4 → TCP/UDP) and classify every inner checksum:
 *  - `complete`: a valid full checksum,
 *  - `partial`:  the field holds only the (non-complemented) pseudo-header sum, i.e. the packet
 *                left the stack as CHECKSUM_PARTIAL and the checksum is left to the NIC,
 *  - `bad`:      neither,
 *  - `truncated`: not enough captured bytes to tell,
 *  - `none` (UDP only): checksum field 0.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import {
  delay,
  registerSyncCleanup,
  tempDirPrefix,
  terminate,
  waitForExit,
  type Netns,
} from './netns';

export type ChecksumClass = 'complete' | 'partial' | 'bad' | 'truncated' | 'none';

/** Counts per class. */
export type ChecksumCounts = Record<ChecksumClass, number>;

/** One classified inner L4 segment. */
export interface InnerSegment {
  outerSrc: string;
  outerDst: string;
  vni: number;
  innerSrc: string;
  innerDst: string;
  protocol: 'tcp' | 'udp';
  srcPort: number;
  dstPort: number;
  /** Inner L4 length from the inner IPv4 header (may exceed the MTU for GSO packets). */
  l4Length: number;
  payloadLength: number;
  checksum: number;
  class: ChecksumClass;
}

/** Result of analysing a capture. */
export interface ChecksumReport {
  /** Packets in the file. */
  packets: number;
  /** Of those, VXLAN packets that passed the filter. */
  vxlanPackets: number;
  tcp: ChecksumCounts;
  udp: ChecksumCounts;
  /** TCP segments carrying payload, by class. */
  tcpWithPayload: ChecksumCounts;
  /** Inner packets longer than `mtu` (GSO super-packets seen before segmentation). */
  oversize: number;
  segments: InnerSegment[];
}

/** Filter for `analyzeVxlanPcap`; all given fields must match. */
export interface SegmentFilter {
  outerSrc?: string;
  outerDst?: string;
  innerSrc?: string;
  innerDst?: string;
  vxlanPort?: number;
  /** Inner MTU for the `oversize` count (default 1450). */
  mtu?: number;
}

/** One record of a classic pcap file. */
export interface PcapRecord {
  tsSec: number;
  tsFrac: number;
  origLen: number;
  data: Buffer;
}

/** A parsed classic pcap file. */
export interface PcapFile {
  linkType: number;
  snapLen: number;
  nanosecond: boolean;
  records: PcapRecord[];
}

export const LINKTYPE_ETHERNET = 1;

/** Parse a classic (libpcap) capture file; either byte order, µs or ns timestamps. */
export function parsePcap(buf: Buffer): PcapFile {
  if (buf.length < 24) throw new Error('pcap: file shorter than its global header');
  const magicLE = buf.readUInt32LE(0);
  let le: boolean;
  let nanosecond: boolean;
  if (magicLE === 0xa1b2c3d4 || magicLE === 0xa1b23c4d) {
    le = true;
    nanosecond = magicLE === 0xa1b23c4d;
  } else {
    const magicBE = buf.readUInt32BE(0);
    if (magicBE !== 0xa1b2c3d4 && magicBE !== 0xa1b23c4d) {
      throw new Error(`pcap: bad magic 0x${magicLE.toString(16)} (pcapng is not supported)`);
    }
    le = false;
    nanosecond = magicBE === 0xa1b23c4d;
  }
  const u32 = (off: number): number => (le ? buf.readUInt32LE(off) : buf.readUInt32BE(off));
  const snapLen = u32(16);
  const linkType = u32(20) & 0x0fffffff;
  const records: PcapRecord[] = [];
  let off = 24;
  while (off + 16 <= buf.length) {
    const inclLen = u32(off + 8);
    const origLen = u32(off + 12);
    if (inclLen > 0x4000000 || off + 16 + inclLen > buf.length) break; // truncated last record
    records.push({
      tsSec: u32(off),
      tsFrac: u32(off + 4),
      origLen,
      data: buf.subarray(off + 16, off + 16 + inclLen),
    });
    off += 16 + inclLen;
  }
  return { linkType, snapLen, nanosecond, records };
}

/** 16-bit ones'-complement sum (folded, not complemented) of `data`, starting from `initial`. */
export function onesComplementSum(data: Uint8Array, initial = 0): number {
  let sum = initial;
  const n = data.length;
  for (let i = 0; i + 1 < n; i += 2) sum += ((data[i] ?? 0) << 8) | (data[i + 1] ?? 0);
  if (n % 2 === 1) sum += (data[n - 1] ?? 0) << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

/** Folded pseudo-header sum for IPv4 (src, dst as 4 bytes each). */
export function ipv4PseudoHeaderSum(
  src: Uint8Array,
  dst: Uint8Array,
  proto: number,
  len: number,
): number {
  const ph = Buffer.alloc(12);
  ph.set(src.subarray(0, 4), 0);
  ph.set(dst.subarray(0, 4), 4);
  ph[9] = proto;
  ph.writeUInt16BE(len & 0xffff, 10);
  return onesComplementSum(ph);
}

/**
 * Classify the checksum of an L4 segment (`segment` = L4 header + payload as captured,
 * `l4Length` = its length according to the IP header).
 */
export function classifyL4Checksum(
  src: Uint8Array,
  dst: Uint8Array,
  proto: 6 | 17,
  segment: Uint8Array,
  l4Length: number,
): ChecksumClass {
  const csumOffset = proto === 6 ? 16 : 6;
  if (segment.length < csumOffset + 2) return 'truncated';
  const field = ((segment[csumOffset] ?? 0) << 8) | (segment[csumOffset + 1] ?? 0);
  if (proto === 17 && field === 0) return 'none';
  const pseudo = ipv4PseudoHeaderSum(src, dst, proto, l4Length);
  if (segment.length >= l4Length) {
    const total = onesComplementSum(segment.subarray(0, l4Length), pseudo);
    if (total === 0xffff) return 'complete';
  }
  // CHECKSUM_PARTIAL: the stack stored ~csum_tcpudp_magic(...) = the folded pseudo-header sum.
  // (0x0000 and 0xffff are the same number in ones'-complement arithmetic.)
  const norm = (v: number): number => (v === 0 ? 0xffff : v);
  if (norm(field) === norm(pseudo)) return 'partial';
  return segment.length >= l4Length ? 'bad' : 'truncated';
}

function ip4(b: Uint8Array): string {
  return `${b[0] ?? 0}.${b[1] ?? 0}.${b[2] ?? 0}.${b[3] ?? 0}`;
}

function zeroCounts(): ChecksumCounts {
  return { complete: 0, partial: 0, bad: 0, truncated: 0, none: 0 };
}

interface Ipv4View {
  src: Buffer;
  dst: Buffer;
  proto: number;
  payload: Buffer;
  /** L4 length per the header (total length − IHL). */
  l4Length: number;
}

/** Parse an Ethernet frame carrying IPv4 (skips 802.1Q tags); null if not an unfragmented IPv4. */
function ethIpv4(frame: Buffer): Ipv4View | null {
  let off = 12;
  if (frame.length < 14) return null;
  let type = frame.readUInt16BE(off);
  for (let tags = 0; (type === 0x8100 || type === 0x88a8) && tags < 2; tags++) {
    off += 4;
    if (frame.length < off + 2) return null;
    type = frame.readUInt16BE(off);
  }
  if (type !== 0x0800) return null;
  const ip = frame.subarray(off + 2);
  if (ip.length < 20 || (ip[0] ?? 0) >> 4 !== 4) return null;
  const ihl = ((ip[0] ?? 0) & 0x0f) * 4;
  if (ihl < 20 || ip.length < ihl) return null;
  const total = ip.readUInt16BE(2);
  const frag = ip.readUInt16BE(6);
  if ((frag & 0x1fff) !== 0 || (frag & 0x2000) !== 0) return null; // fragment
  return {
    src: ip.subarray(12, 16),
    dst: ip.subarray(16, 20),
    proto: ip[9] ?? 0,
    payload: ip.subarray(ihl, Math.max(ihl, Math.min(ip.length, total))),
    l4Length: Math.max(0, total - ihl),
  };
}

/** Analyse a pcap (Ethernet) of VXLAN traffic and classify every inner TCP/UDP checksum. */
export function analyzeVxlanPcap(buf: Buffer, filter: SegmentFilter = {}): ChecksumReport {
  const pcap = parsePcap(buf);
  if (pcap.linkType !== LINKTYPE_ETHERNET) {
    throw new Error(`pcap: link type ${pcap.linkType} not supported (need Ethernet)`);
  }
  const port = filter.vxlanPort ?? 8472;
  const mtu = filter.mtu ?? 1450;
  const report: ChecksumReport = {
    packets: pcap.records.length,
    vxlanPackets: 0,
    tcp: zeroCounts(),
    udp: zeroCounts(),
    tcpWithPayload: zeroCounts(),
    oversize: 0,
    segments: [],
  };
  for (const rec of pcap.records) {
    const outer = ethIpv4(rec.data);
    if (outer === null || outer.proto !== 17 || outer.payload.length < 16) continue;
    const udp = outer.payload;
    if (udp.readUInt16BE(2) !== port) continue;
    const outerSrc = ip4(outer.src);
    const outerDst = ip4(outer.dst);
    if (filter.outerSrc !== undefined && filter.outerSrc !== outerSrc) continue;
    if (filter.outerDst !== undefined && filter.outerDst !== outerDst) continue;
    const vxlan = udp.subarray(8);
    if (((vxlan[0] ?? 0) & 0x08) === 0) continue; // VNI flag not set
    const vni = vxlan.readUIntBE(4, 3);
    report.vxlanPackets++;
    const inner = ethIpv4(vxlan.subarray(8));
    if (inner === null || (inner.proto !== 6 && inner.proto !== 17)) continue;
    const innerSrc = ip4(inner.src);
    const innerDst = ip4(inner.dst);
    if (filter.innerSrc !== undefined && filter.innerSrc !== innerSrc) continue;
    if (filter.innerDst !== undefined && filter.innerDst !== innerDst) continue;
    const l4 = inner.payload;
    const proto = inner.proto;
    const cls = classifyL4Checksum(inner.src, inner.dst, proto, l4, inner.l4Length);
    const hdrLen = proto === 6 ? ((l4[12] ?? 0) >> 4) * 4 : 8;
    const seg: InnerSegment = {
      outerSrc,
      outerDst,
      vni,
      innerSrc,
      innerDst,
      protocol: proto === 6 ? 'tcp' : 'udp',
      srcPort: l4.length >= 2 ? l4.readUInt16BE(0) : 0,
      dstPort: l4.length >= 4 ? l4.readUInt16BE(2) : 0,
      l4Length: inner.l4Length,
      payloadLength: Math.max(0, inner.l4Length - hdrLen),
      checksum: l4.length >= (proto === 6 ? 18 : 8) ? l4.readUInt16BE(proto === 6 ? 16 : 6) : -1,
      class: cls,
    };
    report.segments.push(seg);
    if (proto === 6) {
      report.tcp[cls]++;
      if (seg.payloadLength > 0) report.tcpWithPayload[cls]++;
    } else {
      report.udp[cls]++;
    }
    if (inner.l4Length + 20 > mtu) report.oversize++;
  }
  return report;
}

/** Options for `VxlanCapture.start`. */
export interface CaptureOptions {
  iface?: string;
  port?: number;
  /** tcpdump -c bound. Default 5000. */
  maxPackets?: number;
  /** The capture is stopped (SIGINT) after this long at the latest. Default 30 000 ms. */
  maxDurationMs?: number;
  /** Bound for tcpdump to report "listening on". Default 5000 ms. */
  startTimeoutMs?: number;
}

/** A tcpdump capture of VXLAN traffic in a netns, written to a private temp file. */
export class VxlanCapture {
  private stderr = '';
  private pcap: Buffer | undefined;
  private readonly unregister: () => void;
  private readonly hardStop: NodeJS.Timeout;

  private constructor(
    readonly ns: Netns,
    private readonly child: ChildProcess,
    private readonly dir: string,
    readonly file: string,
    maxDurationMs: number,
  ) {
    child.stderr?.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.unregister = registerSyncCleanup(() => rmSync(dir, { recursive: true, force: true }));
    this.hardStop = setTimeout(() => child.kill('SIGINT'), maxDurationMs);
    this.hardStop.unref();
  }

  /** Start tcpdump and wait until it reports that it is listening (the filter is attached). */
  static async start(ns: Netns, opts: CaptureOptions = {}): Promise<VxlanCapture> {
    const dir = mkdtempSync(tempDirPrefix('pcap'));
    const file = join(dir, 'vxlan.pcap');
    const child = ns.spawn(
      [
        'tcpdump',
        '-i',
        opts.iface ?? 'eth0',
        '-n',
        '-U',
        '--immediate-mode',
        '-s',
        '0',
        '-Z',
        'root',
        '-c',
        String(opts.maxPackets ?? 5000),
        '-w',
        file,
        'udp',
        'dst',
        'port',
        String(opts.port ?? 8472),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    const cap = new VxlanCapture(ns, child, dir, file, opts.maxDurationMs ?? 30_000);
    const timeoutMs = opts.startTimeoutMs ?? 5000;
    try {
      await new Promise<void>((resolve, reject) => {
        const done = (e?: Error): void => {
          clearTimeout(timer);
          child.stderr?.removeListener('data', onData);
          child.removeListener('exit', onExit);
          if (e === undefined) resolve();
          else reject(e);
        };
        const onData = (): void => {
          if (/listening on /.test(cap.stderr)) done();
        };
        const onExit = (): void => done(new Error(`tcpdump exited: ${cap.stderr.trim()}`));
        const timer = setTimeout(
          () => done(new Error(`tcpdump not listening after ${timeoutMs} ms: ${cap.stderr}`)),
          timeoutMs,
        );
        child.stderr?.on('data', onData);
        child.once('exit', onExit);
        onData();
      });
    } catch (e) {
      await cap.discard();
      throw e;
    }
    return cap;
  }

  /** tcpdump's stderr so far (includes the final "N packets captured" summary after stop). */
  get log(): string {
    return this.stderr;
  }

  /**
   * Stop the capture (SIGINT → tcpdump flushes), read and delete the file, and analyse it with
   * `filter`. Idempotent; later calls (or `analyze`) re-analyse the same packets.
   */
  async stop(filter: SegmentFilter = {}): Promise<ChecksumReport> {
    if (this.pcap === undefined) {
      clearTimeout(this.hardStop);
      try {
        if (this.child.exitCode === null && this.child.signalCode === null) {
          await this.drain();
          this.child.kill('SIGINT');
          if (!(await waitForExit(this.child, 3000))) await terminate(this.child, 1000);
        }
        this.pcap = readFileSync(this.file);
      } finally {
        rmSync(this.dir, { recursive: true, force: true });
        this.unregister();
      }
    }
    return this.analyze(filter);
  }

  /**
   * Packets still in the socket/ring when tcpdump gets SIGINT are lost, so before stopping wait
   * (bounded: ≤ 2 s) until the file has not grown for 150 ms. There is no event for "tcpdump has
   * written everything the kernel handed it", hence the polling.
   */
  private async drain(): Promise<void> {
    let last = -1;
    let stableSince = Date.now();
    const deadline = Date.now() + 2000;
    for (let i = 0; i < 200 && Date.now() < deadline; i++) {
      let size: number;
      try {
        size = statSync(this.file).size;
      } catch {
        size = 0;
      }
      if (size !== last) {
        last = size;
        stableSince = Date.now();
      } else if (Date.now() - stableSince >= 150) {
        return;
      }
      await delay(25);
    }
  }

  /** Analyse the stopped capture with another filter. */
  analyze(filter: SegmentFilter = {}): ChecksumReport {
    if (this.pcap === undefined) throw new Error('capture not stopped yet');
    return analyzeVxlanPcap(this.pcap, filter);
  }

  /** Kill the capture without analysing. */
  async discard(): Promise<void> {
    clearTimeout(this.hardStop);
    await terminate(this.child, 1000).catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
    this.unregister();
  }
}
