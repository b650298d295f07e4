/**
 * `watch --cni-socket`: the guard answers the shim's CNI calls (cni/server.ts) once it is ready,
 * from its live state and, where the mesh view runs, the mesh's.
 */
import { isAbsolute, join } from 'node:path';

import type { CniSocketServer } from '../cni/server';
import type { FlannelGuard } from '../guard/guard';
import type { MeshSnapshot } from '../mesh/view';
import { UsageError } from './flags';
import type { LogLine } from './log-line';

/** The socket's path: 'on' puts it in the state folder, as the shim's default expects. */
export function cniSocketPath(value: string, stateDir: string): string | null {
  if (value === 'off') return null;
  if (value === 'on') {
    if (stateDir === 'off') throw new UsageError('--cni-socket on: needs --state-dir (or a path)');
    return join(stateDir, 'cni.sock');
  }
  if (!isAbsolute(value))
    throw new UsageError(`--cni-socket ${value}: an absolute path, on or off`);
  return value;
}

export async function serveCni(
  path: string,
  guard: FlannelGuard,
  mesh: (() => MeshSnapshot) | undefined,
  log: LogLine,
): Promise<CniSocketServer> {
  // Loaded when asked for: --help and the guard without it never need the CNI semantics.
  const { CniSocketServer: Server, guardBackend } = await import('../cni/server.js');
  const server = await Server.listen({
    path,
    backend: guardBackend({ pods: guard.podCheck(), ...(mesh === undefined ? {} : { mesh }) }),
    onProblem: (message) => {
      log('cniSocket', 'warn', { message }, message);
    },
  });
  log('cniSocket', 'info', { path }, `answering CNI calls on ${path}`);
  return server;
}
