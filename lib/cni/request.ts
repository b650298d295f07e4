/**
 * The CNI semantics the plugin answers by (spec 1.0.0 and 1.1.0): the commands and their
 * environment, the plugin configuration and its checks, the request read from stdin, the
 * spec's error codes and error object, and the bounds (budget, stdin and file sizes).
 */
import { MAX_PEERS, validatePeer, type PeerExpectation } from '../ensure/peers';
import { RANGES, describeRange, parseMac, validateInterfaceName } from '../core/validate';

export const SUPPORTED_VERSIONS = ['1.0.0', '1.1.0'] as const;
export const DEFAULT_BUDGET_MS = 1000;
/** A network configuration with MAX_PEERS peers is about 1 MiB. */
export const MAX_STDIN_BYTES = 8 * 1024 * 1024;
export const MAX_EXPECT_FILE_BYTES = 8 * 1024 * 1024;
/**
 * After the budget the writes stop and the result is reported; should a
 * system call hang past this much more, the plugin answers and exits anyway.
 */
export const BACKSTOP_MS = 250;
/**
 * A runtime writes the whole configuration at once and closes stdin; one that has not in this
 * long never will. Bounded apart from the budget, which the configuration sets.
 */
export const STDIN_TIMEOUT_MS = 10_000;

/** The spec's well-known error codes, and this plugin's own (100+). */
export const CNI_ERRORS = {
  INCOMPATIBLE_VERSION: 1,
  UNSUPPORTED_FIELD: 2,
  UNKNOWN_CONTAINER: 3,
  INVALID_ENVIRONMENT: 4,
  IO_FAILURE: 5,
  DECODING_FAILURE: 6,
  INVALID_CONFIG: 7,
  TRY_AGAIN_LATER: 11,
  NOT_AVAILABLE: 50,
  NOT_AVAILABLE_LIMITED: 51,
  VTEP_DRIFTED: 100,
  VTEP_UNAVAILABLE: 101,
} as const;

const COMMANDS = ['ADD', 'DEL', 'CHECK', 'VERSION', 'STATUS', 'GC'] as const;
export type Command = (typeof COMMANDS)[number];

export class CniError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly details?: string,
  ) {
    super(message);
  }
}

/** The plugin's own configuration fields (besides cniVersion, name, type, prevResult). */
export interface PluginConfig {
  /** The VXLAN device (default flannel.1). */
  device: string;
  /** This node's published VtepMAC. */
  mac?: string;
  /** The other nodes' published VTEPs. */
  peers: PeerExpectation[];
  /**
   * A JSON file `{ "mac"?: string, "peers"?: PeerExpectation[] }` written by whatever knows
   * the published state (read without blocking; its fields win over `mac` and `peers`; a
   * missing file means nothing is published yet).
   */
  expectFile?: string;
  offload: Record<string, boolean> | 'none' | undefined;
  budgetMs: number;
  /** Fail ADD when the VTEP cannot be checked or fixed (default false: report and go on). */
  failOnError: boolean;
  /** The guard's socket the shim asks (server.ts); read by the shim, checked here alike. */
  socket: string;
}

/** Where the shim asks the guard unless the configuration's `socket` says otherwise. */
export const DEFAULT_CNI_SOCKET = '/run/flannel-guard/cni.sock';
/** sun_path less its NUL; printable ASCII without a quote or backslash, as the shim checks it. */
const SOCKET_PATH = /^\/[\x20-\x21\x23-\x5b\x5d-\x7e]{0,106}$/;

export interface CniRequest {
  command: Command;
  cniVersion: string;
  config: Record<string, unknown>;
  plugin: PluginConfig;
}

export interface CniEnvironment {
  [name: string]: string | undefined;
}

function required(env: CniEnvironment, name: string, command: Command): string {
  const value = env[name];
  if (value === undefined || value === '') {
    throw new CniError(
      CNI_ERRORS.INVALID_ENVIRONMENT,
      `required env variable ${name} missing`,
      `${command} needs ${name}`,
    );
  }
  return value;
}

/** Checks the environment variables the spec requires for `command` (as libcni's skel does). */
export function checkEnvironment(env: CniEnvironment): Command {
  const raw = env.CNI_COMMAND;
  if (raw === undefined || raw === '') {
    throw new CniError(CNI_ERRORS.INVALID_ENVIRONMENT, 'required env variable CNI_COMMAND missing');
  }
  const command = COMMANDS.find((c) => c === raw);
  if (command === undefined) {
    throw new CniError(CNI_ERRORS.INVALID_ENVIRONMENT, `unknown CNI_COMMAND: ${raw}`);
  }
  if (command === 'ADD' || command === 'CHECK' || command === 'DEL') {
    const containerId = required(env, 'CNI_CONTAINERID', command);
    if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/.test(containerId)) {
      throw new CniError(
        CNI_ERRORS.INVALID_ENVIRONMENT,
        'invalid characters in CNI_CONTAINERID',
        containerId,
      );
    }
    const ifname = required(env, 'CNI_IFNAME', command);
    try {
      validateInterfaceName(ifname, 'CNI_IFNAME');
    } catch (error) {
      throw new CniError(
        CNI_ERRORS.INVALID_ENVIRONMENT,
        'invalid CNI_IFNAME',
        error instanceof Error ? error.message : String(error),
      );
    }
    if (command !== 'DEL') required(env, 'CNI_NETNS', command);
    required(env, 'CNI_PATH', command);
  }
  return command;
}

function versionAtLeast(version: string, minimum: string): boolean {
  const parse = (v: string): number[] => v.split('.').map((part) => Number(part));
  const [a, b] = [parse(version), parse(minimum)];
  for (let i = 0; i < 3; i += 1) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x > y;
  }
  return true;
}

function invalidConfig(message: string, details?: string): CniError {
  return new CniError(CNI_ERRORS.INVALID_CONFIG, message, details);
}

/** The plugin's fields of a network configuration, validated. */
export function parsePluginConfig(config: Record<string, unknown>): PluginConfig {
  const plugin: PluginConfig = {
    device: 'flannel.1',
    peers: [],
    offload: undefined,
    budgetMs: DEFAULT_BUDGET_MS,
    failOnError: false,
    socket: DEFAULT_CNI_SOCKET,
  };
  const wrap = <T>(field: string, parse: () => T): T => {
    try {
      return parse();
    } catch (error) {
      throw invalidConfig(
        `invalid ${field}`,
        error instanceof Error ? error.message : String(error),
      );
    }
  };
  if (config.device !== undefined) {
    plugin.device = wrap('device', () => validateInterfaceName(config.device, 'device'));
  }
  if (config.mac !== undefined) plugin.mac = wrap('mac', () => parseMac(config.mac));
  if (config.peers !== undefined) {
    if (!Array.isArray(config.peers)) throw invalidConfig('invalid peers', 'must be an array');
    if (config.peers.length > MAX_PEERS) {
      throw invalidConfig('invalid peers', `${config.peers.length} peers: at most ${MAX_PEERS}`);
    }
    plugin.peers = wrap('peers', () =>
      (config.peers as PeerExpectation[]).map((peer) => validatePeer(peer)),
    );
  }
  if (config.expectFile !== undefined) {
    if (typeof config.expectFile !== 'string' || !config.expectFile.startsWith('/')) {
      throw invalidConfig('invalid expectFile', 'must be an absolute path');
    }
    plugin.expectFile = config.expectFile;
  }
  if (config.offload !== undefined) {
    const offload = config.offload;
    if (offload === 'none') plugin.offload = 'none';
    else if (
      typeof offload === 'object' &&
      offload !== null &&
      !Array.isArray(offload) &&
      Object.values(offload).every((v) => typeof v === 'boolean')
    ) {
      plugin.offload = offload as Record<string, boolean>;
    } else {
      throw invalidConfig('invalid offload', 'an object of feature name to boolean, or "none"');
    }
  }
  if (config.budgetMs !== undefined) {
    const budget = config.budgetMs;
    const range = RANGES.cniBudgetMs;
    if (
      typeof budget !== 'number' ||
      !Number.isInteger(budget) ||
      budget < range.min ||
      budget > range.max
    ) {
      throw invalidConfig('invalid budgetMs', describeRange(range));
    }
    plugin.budgetMs = budget;
  }
  if (config.socket !== undefined) {
    if (typeof config.socket !== 'string' || !SOCKET_PATH.test(config.socket)) {
      throw invalidConfig('invalid socket', 'an absolute path of at most 107 printable characters');
    }
    plugin.socket = config.socket;
  }
  if (config.failOnError !== undefined) {
    if (typeof config.failOnError !== 'boolean') {
      throw invalidConfig('invalid failOnError', 'must be a boolean');
    }
    plugin.failOnError = config.failOnError;
  }
  return plugin;
}

/** Parses stdin into a request for `command`, enforcing the spec's version rules. */
export function parseRequest(command: Command, stdin: string): CniRequest {
  let config: unknown;
  try {
    config = stdin.trim() === '' && command === 'VERSION' ? {} : JSON.parse(stdin);
  } catch (error) {
    throw new CniError(
      CNI_ERRORS.DECODING_FAILURE,
      'failed to decode the network configuration',
      error instanceof Error ? error.message : String(error),
    );
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new CniError(CNI_ERRORS.DECODING_FAILURE, 'the network configuration is not an object');
  }
  const object = config as Record<string, unknown>;
  const cniVersion = object.cniVersion;
  if (command === 'VERSION') {
    return {
      command,
      cniVersion: typeof cniVersion === 'string' ? cniVersion : '1.1.0',
      config: object,
      plugin: parsePluginConfig({}),
    };
  }
  if (typeof cniVersion !== 'string' || cniVersion === '') {
    throw invalidConfig('cniVersion missing from the network configuration');
  }
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(cniVersion)) {
    throw new CniError(
      CNI_ERRORS.INCOMPATIBLE_VERSION,
      'incompatible CNI versions',
      `config is "${cniVersion}", plugin supports ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }
  if ((command === 'STATUS' || command === 'GC') && !versionAtLeast(cniVersion, '1.1.0')) {
    throw new CniError(
      CNI_ERRORS.INCOMPATIBLE_VERSION,
      `config version does not allow ${command}`,
      `${command} needs cniVersion 1.1.0 or later, config is "${cniVersion}"`,
    );
  }
  if (typeof object.name !== 'string' || object.name === '') {
    throw invalidConfig('name missing from the network configuration');
  }
  if (typeof object.type !== 'string' || object.type === '') {
    throw invalidConfig('type missing from the network configuration');
  }
  const prevResult = object.prevResult;
  if (prevResult !== undefined && (typeof prevResult !== 'object' || prevResult === null)) {
    throw invalidConfig('prevResult is not an object');
  }
  if ((command === 'ADD' || command === 'CHECK') && prevResult === undefined) {
    throw invalidConfig(
      `${object.type} must be called as a chained plugin`,
      `${command} needs a prevResult (put it after the plugin that creates the interface)`,
    );
  }
  return { command, cniVersion, config: object, plugin: parsePluginConfig(object) };
}

export function errorObject(cniVersion: string, error: CniError): Record<string, unknown> {
  const object: Record<string, unknown> = { cniVersion, code: error.code, msg: error.message };
  if (error.details !== undefined) object.details = error.details;
  return object;
}
