/**
 * The standalone plugin's backend: ensureVtep in the plugin's own process, against what the
 * configuration (and its expectFile) publish. For custom wrappers and hosts without a guard; on
 * a node with one, the shim asks the guard instead (server.ts).
 */
import { readRegularFile } from '../core/files';
import type { PeerExpectation } from '../ensure/peers';
import type { VtepBackend } from './answer';
import {
  CNI_ERRORS,
  CniError,
  MAX_EXPECT_FILE_BYTES,
  parsePluginConfig,
  type PluginConfig,
} from './request';

/** The published state: plugin config, overridden by the expect file's fields. */
export function expectations(plugin: PluginConfig): { mac?: string; peers: PeerExpectation[] } {
  const result: { mac?: string; peers: PeerExpectation[] } = { peers: plugin.peers };
  if (plugin.mac !== undefined) result.mac = plugin.mac;
  if (plugin.expectFile === undefined) return result;
  let text: string | null;
  try {
    text = readRegularFile(plugin.expectFile, MAX_EXPECT_FILE_BYTES, 'expectFile', {
      missing: 'null',
    });
  } catch (error) {
    throw new CniError(
      CNI_ERRORS.IO_FAILURE,
      `cannot read expectFile ${plugin.expectFile}`,
      error instanceof Error ? error.message : String(error),
    );
  }
  // Not written yet: nothing is published, so only the configured fields apply.
  if (text === null) return result;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new CniError(
      CNI_ERRORS.DECODING_FAILURE,
      `expectFile ${plugin.expectFile} is not JSON`,
      error instanceof Error ? error.message : String(error),
    );
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new CniError(
      CNI_ERRORS.DECODING_FAILURE,
      `expectFile ${plugin.expectFile} does not hold a JSON object`,
      `found ${parsed === null ? 'null' : Array.isArray(parsed) ? 'an array' : typeof parsed}; expected { "mac"?: string, "peers"?: [...] }`,
    );
  }
  const file = parsePluginConfig(parsed as Record<string, unknown>);
  const raw = parsed as { mac?: unknown; peers?: unknown };
  if (raw.mac !== undefined && file.mac !== undefined) result.mac = file.mac;
  if (raw.peers !== undefined) result.peers = file.peers;
  return result;
}

export const standaloneBackend: VtepBackend = {
  async ensure(plugin, repair, signal) {
    const expected = expectations(plugin);
    // Loaded here, with the addon: VERSION, DEL and GC never need them.
    const { ensureVtep } = await import('../ensure/ensure.js');
    const result = await ensureVtep({
      device: plugin.device,
      ...(expected.mac === undefined ? {} : { mac: expected.mac }),
      peers: expected.peers,
      ...(plugin.offload === undefined ? {} : { offload: plugin.offload }),
      dryRun: !repair,
      signal,
    });
    return { ...result, writes: result.actions.length };
  },
};
