/**
 * A small flannel-like cluster in network namespaces, programmed the way flannel's vxlan backend
 * does it.
 *
 *   switch netns:  br0 ── sw-n<i> (veth) ──┐
 *   node<i> netns: eth0 192.0.2.(10+i)/24 ─┘   flannel.1 (vxlan id 1, dstport 8472, nolearning, noudpcsum,
 *                  local 192.0.2.(10+i) dev eth0, mtu 1450) with 198.18.<i>.0/32,
 *                  cni0 bridge 198.18.<i>.1/24 ── veth-pod ──┐
 *   pod<i> netns:  eth0 198.18.<i>.2/24 (mtu 1450), default via 198.18.<i>.1 ───┘
 *
 * Like flanneld, the VTEP is created and its MAC read immediately (one `ip -batch` process:
 * `link add` + `link show`), before udev's MACAddressPolicy=persistent rewrite lands; that MAC is
 * the node's published VtepMAC. Every other node gets
 *   ip neigh replace 198.18.<i>.0 lladdr MAC dev flannel.1 nud permanent
 *   bridge fdb replace MAC dev flannel.1 dst 192.0.2.(10+i) self permanent
 *   ip route replace 198.18.<i>.0/24 via 198.18.<i>.0 dev flannel.1 onlink
 *
 * With `wire: 'relay'` (two nodes) the switch has no bridge: scripts/bench/wire-relay.c copies
 * every frame between sw-n1 and sw-n2 byte for byte through AF_PACKET, so a checksum a node left
 * to the NIC (CHECKSUM_PARTIAL, TX checksum offload on flannel.1) arrives unfinished and the
 * other node drops it, as behind the seed's VMXNET3: ping passes, TCP and UDP do not.
 */
import { buildBenchTool } from './flooder';
import { Netns, waitFor } from './netns';
import { Udevd } from './udevd';
import { IpLinkMonitor } from './ip-monitor';
import { EchoAgent, pingFrom, tcpEchoFrom, udpEchoFrom } from './traffic';

export const VTEP = 'flannel.1';
export const VXLAN_PORT = 8472;
export const VTEP_MTU = 1450;

/** Options for `FlannelTestbed.create`. */
export interface TestbedOptions {
  nodes: 2 | 3;
  /** Run a private systemd-udevd per node (distinct machine-ids), started before the VTEP. */
  udev: boolean;
  /** Extra `.link` files for every node's udevd (e.g. MACAddressPolicy=none). */
  linkFiles?: Record<string, string>;
  /** Extra udev rules for every node's udevd. */
  rules?: Record<string, string>;
  /** The underlay between the nodes: a bridge (default), or the relay that finishes no checksum. */
  wire?: 'bridge' | 'relay';
}

/** Options for a traffic probe. */
export interface ProbeOptions {
  timeoutMs?: number;
}

interface IpLink {
  ifname: string;
  address?: string;
}

/** How one VTEP creation went. */
export interface VtepCreation {
  /** The MAC read right after `link add` (what flanneld publishes). */
  publishedMac: string;
  /** MAC after udev processed the `add` event (equals publishedMac without udev). */
  finalMac: string;
  /** The MAC udev said it applied ("Applying persistent MAC address: ..."), if any. */
  udevAppliedMac: string | null;
}

/** One node of the testbed. */
export class TestbedNode {
  /** The node's published VtepMAC, as programmed on its peers. */
  publishedMac = '';
  /** Details of the latest VTEP creation. */
  lastCreation: VtepCreation | undefined;
  agent: EchoAgent | undefined;
  udevd: Udevd | undefined;
  /** `ip monitor link` in the node since set-up: how flanneld's read of a new VTEP is modelled. */
  linkEvents: IpLinkMonitor | undefined;

  constructor(
    /** 1-based node number. */
    readonly index: number,
    readonly ns: Netns,
    readonly podNs: Netns,
  ) {}

  get name(): string {
    return `node${this.index}`;
  }
  /** Underlay address on eth0. */
  get underlayIp(): string {
    return `192.0.2.${10 + this.index}`;
  }
  /** flannel.1 address (the subnet's .0, as flannel does). */
  get vtepIp(): string {
    return `198.18.${this.index}.0`;
  }
  get podCidr(): string {
    return `198.18.${this.index}.0/24`;
  }
  get gatewayIp(): string {
    return `198.18.${this.index}.1`;
  }
  get podIp(): string {
    return `198.18.${this.index}.2`;
  }

  /**
   * `--udev-root` for a guard of this node: its udevd's own root (private /run and
   * machine-id), seen through /proc/PID/root. None without udev.
   */
  udevRootFlags(): string[] {
    return this.udevd ? ['--udev-root', `/proc/${this.udevd.pid}/root`] : [];
  }

  /** The VTEP's MAC right now. */
  async currentMac(): Promise<string> {
    return macOf(this.ns, VTEP);
  }

  /** /sys/class/net/flannel.1/addr_assign_type as seen inside the node netns. */
  async addrAssignType(): Promise<number> {
    return Number((await this.ns.readFile(`/sys/class/net/${VTEP}/addr_assign_type`)).trim());
  }

  /** `ip link set flannel.1 address MAC` (flushes this node's neighbour entries on flannel.1). */
  async setVtepMac(mac: string): Promise<void> {
    await this.ns.ip(['link', 'set', VTEP, 'address', mac]);
  }

  /** Neighbour entries on flannel.1. */
  async neighbours(): Promise<{ dst: string; lladdr?: string; state?: string[] }[]> {
    return this.ns.ipJson(['neigh', 'show', 'dev', VTEP]);
  }

  /** FDB entries on flannel.1 (`bridge fdb show dev flannel.1`). */
  async fdb(): Promise<{ mac: string; dst?: string; flags?: string[]; state?: string }[]> {
    return JSON.parse(await this.ns.bridge(['-j', 'fdb', 'show', 'dev', VTEP])) as {
      mac: string;
      dst?: string;
    }[];
  }

  /** `ethtool -K flannel.1 tx-checksum-ip-generic on|off`. */
  async setTxChecksum(on: boolean): Promise<void> {
    await this.ns.run(['ethtool', '-K', VTEP, 'tx-checksum-ip-generic', on ? 'on' : 'off']);
  }

  /** Current value of a feature of `ifname` (ethtool -k), e.g. 'tx-checksum-ip-generic'. */
  async feature(feature: string, ifname = VTEP): Promise<string> {
    const out = (await this.ns.run(['ethtool', '-k', ifname])).stdout;
    const line = out.split('\n').find((l) => l.trim().startsWith(`${feature}:`));
    if (line === undefined) throw new Error(`feature ${feature} not found on ${ifname}`);
    return line.split(':')[1]?.trim() ?? '';
  }
}

async function macOf(ns: Netns, ifname: string): Promise<string> {
  const links = await ns.ipJson<IpLink[]>(['link', 'show', 'dev', ifname]);
  const mac = links[0]?.address;
  if (mac === undefined) throw new Error(`no MAC for ${ifname} in ${ns.name}`);
  return mac;
}

/** The flannel-like cluster. */
export class FlannelTestbed {
  private destroyed = false;

  private constructor(
    readonly options: TestbedOptions,
    readonly switchNs: Netns,
    readonly nodes: readonly TestbedNode[],
  ) {}

  /** Build the cluster. On any failure everything created so far is removed. */
  static async create(options: TestbedOptions): Promise<FlannelTestbed> {
    if (options.nodes !== 2 && options.nodes !== 3) throw new Error('nodes must be 2 or 3');
    const created: Netns[] = [];
    const nodes: TestbedNode[] = [];
    let bed: FlannelTestbed | undefined;
    try {
      const sw = await Netns.create('fgt');
      created.push(sw);
      await disableIpv6(sw);
      if (options.wire === 'relay' && options.nodes !== 2) {
        throw new Error('the relay wire joins two nodes');
      }
      if (options.wire !== 'relay')
        await sw.ipBatch(['link add br0 type bridge', 'link set br0 up']);
      for (let i = 1; i <= options.nodes; i++) {
        const ns = await Netns.create('fgt');
        created.push(ns);
        const pod = await Netns.create('fgt');
        created.push(pod);
        nodes.push(new TestbedNode(i, ns, pod));
      }
      const b = new FlannelTestbed(options, sw, nodes);
      bed = b;
      await Promise.all(nodes.map((n) => b.setUpNode(n)));
      if (options.wire === 'relay') await b.startRelay();
      // Each node's VTEP: created and read like flanneld, then udev has its go.
      await Promise.all(nodes.map((n) => b.createVtep(n)));
      for (const n of nodes) await b.programLocal(n);
      return b;
    } catch (err) {
      if (bed !== undefined) await bed.destroy();
      else await Promise.all(created.map((ns) => ns.destroy()));
      throw err;
    }
  }

  /** Node by 1-based index. */
  node(index: number): TestbedNode {
    const n = this.nodes[index - 1];
    if (n === undefined) throw new Error(`no node ${index}`);
    return n;
  }

  /** Other nodes than `node`. */
  peersOf(node: TestbedNode): TestbedNode[] {
    return this.nodes.filter((n) => n !== node);
  }

  /**
   * Simulated flanneld restart on `node`: delete flannel.1, re-create it (new random MAC, read
   * immediately and re-published), restore its address/up state and its own entries for the
   * peers, and re-program all peers with the new published MAC (but those in `missedBy`: their
   * flanneld missed the Node event). Returns the new published MAC.
   */
  async restartFlannel(node: TestbedNode, missedBy: readonly TestbedNode[] = []): Promise<string> {
    const old = node.publishedMac;
    await node.ns.ip(['link', 'del', VTEP]);
    await this.createVtep(node);
    await this.programLocal(node);
    const mac = node.publishedMac;
    node.publishedMac = old; // reprogramPeers replaces the old entries
    await this.reprogramPeers(node, mac, missedBy);
    return mac;
  }

  /**
   * Publish `mac` as `node`'s VtepMAC: on every other node replace the neighbour entry, move the
   * FDB entry (old MAC removed, new MAC added) and replace the route.
   */
  async reprogramPeers(
    node: TestbedNode,
    mac: string,
    missedBy: readonly TestbedNode[] = [],
  ): Promise<void> {
    const old = node.publishedMac;
    node.publishedMac = mac;
    for (const peer of this.peersOf(node)) {
      if (missedBy.includes(peer)) continue;
      if (old !== '' && old !== mac) {
        await peer.ns
          .bridge(['fdb', 'del', old, 'dev', VTEP, 'dst', node.underlayIp, 'self'])
          .catch(() => undefined);
      }
      await programEntry(peer, node, mac);
    }
  }

  /**
   * (Re-)add `node`'s own neighbour/FDB/route entries for every peer, using the peers' published
   * MACs. Needed after any MAC change of node's flannel.1, which flushes its neighbour entries.
   */
  async programLocal(node: TestbedNode): Promise<void> {
    for (const peer of this.peersOf(node)) {
      if (peer.publishedMac !== '') await programEntry(node, peer, peer.publishedMac);
    }
  }

  /** Pod-to-pod ICMP echo; true on a reply within the timeout (default 2 s). */
  async ping(from: TestbedNode, to: TestbedNode, opts: ProbeOptions = {}): Promise<boolean> {
    return pingFrom(from.podNs, to.podIp, opts.timeoutMs ?? 2000);
  }

  /** Pod-to-pod TCP echo round trip of `bytes` (default 1000); true if echoed within the timeout. */
  async tcp(
    from: TestbedNode,
    to: TestbedNode,
    opts: ProbeOptions & { bytes?: number } = {},
  ): Promise<boolean> {
    await this.ensureAgent(to);
    return tcpEchoFrom(from.podNs, to.podIp, {
      timeoutMs: opts.timeoutMs,
      bytes: opts.bytes,
    });
  }

  /** Pod-to-pod UDP echo; true if echoed within the timeout. */
  async udp(from: TestbedNode, to: TestbedNode, opts: ProbeOptions = {}): Promise<boolean> {
    await this.ensureAgent(to);
    return udpEchoFrom(from.podNs, to.podIp, { timeoutMs: opts.timeoutMs });
  }

  /** Remove everything: agents, udevd processes, all namespaces. Idempotent. */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    const errors: unknown[] = [];
    const attempt = async (fn: () => Promise<void>): Promise<void> => {
      try {
        await fn();
      } catch (e) {
        errors.push(e);
      }
    };
    await Promise.all(
      this.nodes.map(async (n) => {
        await attempt(async () => n.agent?.stop());
        await attempt(async () => n.udevd?.stop());
        await attempt(async () => n.linkEvents?.stop());
        await attempt(() => n.podNs.destroy());
        await attempt(() => n.ns.destroy());
      }),
    );
    await attempt(() => this.switchNs.destroy());
    if (errors.length > 0) {
      throw new AggregateError(errors, `testbed teardown had ${errors.length} error(s)`);
    }
  }

  /** The relay between sw-n1 and sw-n2, for at most 10 minutes (the switch's teardown stops it). */
  private async startRelay(): Promise<void> {
    const child = this.switchNs.spawn([buildBenchTool('wire-relay'), 'sw-n1', 'sw-n2', '600']);
    let output = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk.slice(0, 4096);
    });
    await waitFor(() => output.includes('relaying'), { timeoutMs: 5000, what: 'the wire relay' });
  }

  private async ensureAgent(node: TestbedNode): Promise<void> {
    node.agent ??= await EchoAgent.start(node.podNs);
  }

  /** Underlay, cni0 and the pod; then (optionally) udevd. */
  private async setUpNode(n: TestbedNode): Promise<void> {
    await disableIpv6(n.ns);
    await disableIpv6(n.podNs);
    await n.ns.sysctl('net.ipv4.ip_forward', 1);
    await this.switchNs.ipBatch([
      `link add sw-n${n.index} type veth peer name eth0 netns ${n.ns.name}`,
      this.options.wire === 'relay'
        ? `link set sw-n${n.index} up`
        : `link set sw-n${n.index} master br0 up`,
    ]);
    await n.ns.ipBatch([
      `addr add ${n.underlayIp}/24 dev eth0`,
      'link set eth0 up',
      'link add cni0 type bridge',
      `addr add ${n.gatewayIp}/24 dev cni0`,
      'link set cni0 up',
      `link add veth-pod mtu ${VTEP_MTU} type veth peer name eth0 netns ${n.podNs.name}`,
      'link set veth-pod master cni0 up',
    ]);
    await n.podNs.ipBatch([
      `link set eth0 mtu ${VTEP_MTU}`,
      `addr add ${n.podIp}/24 dev eth0`,
      'link set eth0 up',
      `route add default via ${n.gatewayIp}`,
    ]);
    n.linkEvents = await IpLinkMonitor.start(n.ns);
    if (this.options.udev) {
      n.udevd = await Udevd.start(n.ns, {
        linkFiles: this.options.linkFiles,
        rules: this.options.rules,
      });
    }
  }

  /**
   * Create flannel.1 and publish the MAC the kernel announced it with - the MAC flanneld reads
   * right after LinkAdd, before udev's rewrite lands (the node's `ip monitor`, running since
   * set-up, sees that first RTM_NEWLINK whatever udev does next). With udev, wait until udev has
   * processed the `add` event. Then add 198.18.<i>.0/32 and bring the link up.
   */
  private async createVtep(n: TestbedNode): Promise<void> {
    const udevd = n.udevd;
    const offset = udevd?.logOffset() ?? 0;
    const linkEvents = n.linkEvents;
    if (linkEvents === undefined) throw new Error(`${n.name} is not set up`);
    const from = linkEvents.events.length;
    await n.ns.ip([
      'link',
      'add',
      VTEP,
      'mtu',
      String(VTEP_MTU),
      'type',
      'vxlan',
      'id',
      '1',
      'dstport',
      String(VXLAN_PORT),
      'nolearning',
      // As flanneld creates it (vishvananda/netlink sends UDPCSum false): no outer UDP checksum.
      'noudpcsum',
      'local',
      n.underlayIp,
      'dev',
      'eth0',
    ]);
    // Its own creation, by ifindex: the monitor's pipe may still hold the old device's last
    // events (`ip link del` downs it first: an RTM_NEWLINK with the old MAC).
    const ifindex = Number((await n.ns.readFile(`/sys/class/net/${VTEP}/ifindex`)).trim());
    const created = await linkEvents.waitFor(
      (e) => e.ifindex === ifindex && e.ifname === VTEP && !e.deleted,
      5000,
      from,
    );
    if (created.mac === null) throw new Error(`no MAC in the creation event of ${VTEP}`);
    const published = created.mac;
    let udevApplied: string | null = null;
    if (udevd !== undefined) {
      await udevd.waitForDeviceProcessed(VTEP, offset, 5000);
      udevApplied = udevd.persistentMacApplied(VTEP, offset);
    }
    n.publishedMac = published;
    n.lastCreation = {
      publishedMac: published,
      finalMac: await n.currentMac(),
      udevAppliedMac: udevApplied,
    };
    await n.ns.ipBatch([`addr add ${n.vtepIp}/32 dev ${VTEP}`, `link set ${VTEP} up`]);
  }
}

/** On `on`, program the entries that make `peer` (published as `mac`) reachable. */
async function programEntry(on: TestbedNode, peer: TestbedNode, mac: string): Promise<void> {
  await on.ns.ip(['neigh', 'replace', peer.vtepIp, 'lladdr', mac, 'dev', VTEP, 'nud', 'permanent']);
  await on.ns.bridge([
    'fdb',
    'replace',
    mac,
    'dev',
    VTEP,
    'dst',
    peer.underlayIp,
    'self',
    'permanent',
  ]);
  await on.ns.ip(['route', 'replace', peer.podCidr, 'via', peer.vtepIp, 'dev', VTEP, 'onlink']);
}

async function disableIpv6(ns: Netns): Promise<void> {
  await ns.run([
    'sysctl',
    '-q',
    '-w',
    'net.ipv6.conf.all.disable_ipv6=1',
    'net.ipv6.conf.default.disable_ipv6=1',
  ]);
}
