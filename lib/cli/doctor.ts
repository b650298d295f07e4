/**
 * `flannel-guard doctor` as it runs (its flags are in commands.ts). Exit status: 0 when no check
 * fails (warnings allowed), 1 when one does (or the doctor itself fails), 2 for a bad flag or
 * value, 77 without the privileges to read the namespace. What --fix cannot change is listed
 * as "NOT FIXED".
 */
import { resolve } from 'node:path';

import {
  EXIT_FAILURE,
  checkNetnsFlag,
  parseIfaceFlags,
  parseMacFlags,
  parseOffloadFlags,
} from './common';
import { UsageError, type Flags } from './flags';
import { readRegularFile } from '../core/files';
import { parsePeerSpec, validatePeer, type PeerExpectation } from '../ensure/peers';
import { writeOut } from './stdio';
import type { DoctorOptions } from '../doctor';

/** Room for the peers of a 5000-node cluster several times over. */
const MAX_PEERS_FILE_BYTES = 16 * 1024 * 1024;

/** --peers-file: a JSON array of peers, or an object with a `peers` array. */
export function readPeersFile(path: string): PeerExpectation[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readRegularFile(path, MAX_PEERS_FILE_BYTES, '--peers-file'));
  } catch (error) {
    throw new UsageError(
      `--peers-file ${path}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  const list = Array.isArray(parsed)
    ? (parsed as unknown[])
    : typeof parsed === 'object' &&
        parsed !== null &&
        Array.isArray((parsed as { peers?: unknown }).peers)
      ? (parsed as { peers: unknown[] }).peers
      : null;
  if (list === null) {
    throw new UsageError(`--peers-file ${path}: expected an array of peers or { "peers": [...] }`);
  }
  return list.map((peer) => validatePeer(peer));
}

function options(flags: Flags): DoctorOptions {
  const netns = flags.value('netns');
  checkNetnsFlag(netns);
  const result: DoctorOptions = {
    // A folder given relative to where the command runs, as a shell user means it.
    root: resolve(flags.required('root')),
    interfaces: parseIfaceFlags(flags.list('iface')),
    fix: flags.has('fix'),
    passive: flags.has('passive'),
  };
  const stateDir = flags.required('state-dir');
  if (stateDir !== 'off') result.stateDir = resolve(stateDir);
  if (flags.has('dry-run')) {
    if (!result.fix) throw new UsageError('--dry-run plans what --fix would change: give both');
    result.dryRun = true;
  }
  if (netns !== undefined) result.netns = netns;
  const mac = parseMacFlags(flags.list('mac'));
  if (mac) result.mac = mac;
  const peersFile = flags.value('peers-file');
  const peers = [
    ...(flags.list('peer') ?? []).map((spec) => parsePeerSpec(spec)),
    ...(peersFile === undefined ? [] : readPeersFile(peersFile)),
  ];
  if (peers.length > 0) result.peers = peers;
  const offload = parseOffloadFlags(flags.list('offload'));
  if (offload === 'auto') {
    throw new UsageError(
      '--offload auto: the doctor probes the paths in its offload-probe check; give a fixed policy or none',
    );
  }
  if (offload !== undefined) result.offload = offload;
  return result;
}

/**
 * --cluster: the Nodes give this node's published MACs (unless --mac), the peers (unless --peer
 * or --peers-file), and the cluster's VtepMACs, checked for duplicates.
 */
async function withCluster(flags: Flags, doctorOptions: DoctorOptions): Promise<void> {
  const { clusterFlags, listNodeLeases } = await import('./status-mesh.js');
  const cluster = clusterFlags(flags, '--cluster');
  const readings = await listNodeLeases(cluster);
  const leases = readings.flatMap((reading) => reading.leases);
  doctorOptions.cluster = {
    nodes: readings.length,
    macs: leases.map(({ node, device, mac }) => ({ node, device, mac })),
  };
  const own = new Map(
    leases.filter((lease) => lease.node === cluster.nodeName).map((l) => [l.device, l.mac]),
  );
  doctorOptions.source ??= { name: 'kubernetes', desiredMac: (device) => own.get(device) };
  doctorOptions.peers ??= leases
    .filter((lease) => lease.node !== cluster.nodeName)
    .map((lease) => ({ vtepIp: lease.vtepIp, mac: lease.mac, underlayIp: lease.publicIp }));
}

export async function doctor(flags: Flags): Promise<number> {
  const doctorOptions = options(flags);
  if (flags.has('cluster')) await withCluster(flags, doctorOptions);
  // Loaded when the doctor runs: `watch` and `status` never need its checks.
  const [{ runDoctor }, { formatReport }] = await Promise.all([
    import('../doctor/index.js'),
    import('../doctor/format.js'),
  ]);
  const report = await runDoctor(doctorOptions);
  writeOut(
    flags.has('json') ? `${JSON.stringify(report)}\n` : formatReport(report, flags.has('verbose')),
  );
  return report.verdict === 'fail' ? EXIT_FAILURE : 0;
}
