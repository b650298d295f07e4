/**
 * The bearer credential of the kubeconfig's current user, kept here rather than
 * by client-node, whose 1.3 reads `token` and a non-standard `token-file` but
 * never client-go's `tokenFile`, keeps a token file in one process-wide slot
 * re-read on a 60 s timer only, and runs exec plugins with no deadline, no
 * output cap, writing their `env` into this process's environment. What
 * client-go does, and what this does:
 *
 * - `tokenFile` (and the in-cluster service account's token): read within
 *   bounds and trimmed, at start (a file that cannot be read is refused there),
 *   again when a minute old (client-go's CachedFileTokenSource) and at once
 *   after the server refuses it with 401, so a rotation costs one request;
 *   with `token` as well, the file wins (client-go sends `token` only until its
 *   first re-read);
 * - `token`: sent as is;
 * - `exec` (client.authentication.k8s.io/v1 or v1beta1): run with a deadline,
 *   its output capped and its `env` added to a copy of the environment; its
 *   credential kept until its `expirationTimestamp` or a 401. A plugin that
 *   needs a terminal (`interactiveMode: Always`) is refused at start;
 * - the deprecated `auth-provider`s gcp and azure (removed from client-go in
 *   1.26) are refused at start, naming the exec plugin that replaced them;
 *   oidc, client certificates (files, data, or an exec plugin's), the CA and
 *   basic auth are left to client-node, which turns them into the TLS agent.
 */
import { spawn } from 'node:child_process';
import { dirname, isAbsolute, join, resolve } from 'node:path';

import { invalidArgument } from '../core/errors';
import { readRegularFile } from '../core/files';

/** A token is a JWT of a few KiB; a file far larger is not one. */
const MAX_TOKEN_FILE_BYTES = 64 * 1024;
/** client-go's CachedFileTokenSource re-reads a token file a minute after the last read. */
const TOKEN_FILE_MAX_AGE_MS = 60_000;
/** An exec plugin that has not answered in this long is killed; the request fails. */
const EXEC_TIMEOUT_MS = 30_000;
/** An ExecCredential is a token or a certificate and key: a few KiB. */
const MAX_EXEC_OUTPUT_BYTES = 1024 * 1024;
const EXEC_API_VERSIONS = [
  'client.authentication.k8s.io/v1',
  'client.authentication.k8s.io/v1beta1',
] as const;

/** What a request carries: a bearer token, or a client certificate from an exec plugin. */
export interface Credential {
  token?: string;
  /** PEM, from an exec plugin. */
  clientCertificate?: string;
  clientKey?: string;
}

/** The credential could not be had (a token file gone, an exec plugin failing). */
export class CredentialError extends Error {
  readonly code = 'ECREDENTIALS';
  constructor(message: string) {
    super(message);
    this.name = 'CredentialError';
  }
}

/** The fields of a kubeconfig user this module owns, as the file spells them. */
export interface RawUser {
  token?: unknown;
  tokenFile?: unknown;
  'token-file'?: unknown;
  exec?: unknown;
  'auth-provider'?: unknown;
}

interface ExecConfig {
  command: string;
  args: string[];
  env: Record<string, string>;
  apiVersion: (typeof EXEC_API_VERSIONS)[number];
  installHint: string | undefined;
  provideClusterInfo: boolean;
}

/**
 * Where the bearer credential comes from. `current()` is what the next request
 * carries; `refused()` after a 401 re-reads the source and says whether the
 * credential changed (then the request is worth one retry).
 */
export interface CredentialSource {
  readonly kind: 'none' | 'token' | 'file' | 'exec';
  current(): Promise<Credential>;
  refused(): Promise<boolean>;
}

const NONE: CredentialSource = {
  kind: 'none',
  current: () => Promise.resolve({}),
  refused: () => Promise.resolve(false),
};

class StaticToken implements CredentialSource {
  readonly kind = 'token';
  readonly #token: string;
  constructor(token: string) {
    this.#token = token;
  }
  current(): Promise<Credential> {
    return Promise.resolve({ token: this.#token });
  }
  refused(): Promise<boolean> {
    return Promise.resolve(false);
  }
}

/** A token file: read at start, when a minute old, and after a 401. */
export class TokenFile implements CredentialSource {
  readonly kind = 'file';
  readonly path: string;
  readonly #now: () => number;
  #token: string;
  #readAt: number;

  constructor(path: string, now: () => number = Date.now) {
    this.path = path;
    this.#now = now;
    this.#token = this.#read(); // a file that cannot be read is refused at start
    this.#readAt = now();
  }

  #read(): string {
    const token = readRegularFile(this.path, MAX_TOKEN_FILE_BYTES, 'token file').trim();
    if (token === '') throw invalidArgument(`token file ${this.path}: the file is empty`);
    return token;
  }

  /** Re-reads the file; on failure the last token is kept (client-go does the same). */
  #reread(): string | Error {
    try {
      this.#token = this.#read();
    } catch (error) {
      return error as Error;
    }
    this.#readAt = this.#now();
    return this.#token;
  }

  current(): Promise<Credential> {
    if (this.#now() - this.#readAt >= TOKEN_FILE_MAX_AGE_MS) this.#reread();
    return Promise.resolve({ token: this.#token });
  }

  refused(): Promise<boolean> {
    const before = this.#token;
    const read = this.#reread();
    if (read instanceof Error) return Promise.reject(new CredentialError(read.message));
    return Promise.resolve(read !== before);
  }
}

/** An exec credential plugin, run when no credential is held or the held one expired or was refused. */
class ExecPlugin implements CredentialSource {
  readonly kind = 'exec';
  readonly #config: ExecConfig;
  readonly #server: string;
  #held: { credential: Credential; expiresAt: number } | undefined;
  #running: Promise<Credential> | undefined;

  constructor(config: ExecConfig, server: string) {
    this.#config = config;
    this.#server = server;
  }

  current(): Promise<Credential> {
    if (this.#held && Date.now() < this.#held.expiresAt) {
      return Promise.resolve(this.#held.credential);
    }
    this.#held = undefined;
    // Concurrent requests share one run.
    this.#running ??= this.#run().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  async refused(): Promise<boolean> {
    const before = this.#held?.credential;
    this.#held = undefined;
    const after = await this.current();
    return (
      before === undefined ||
      before.token !== after.token ||
      before.clientCertificate !== after.clientCertificate ||
      before.clientKey !== after.clientKey
    );
  }

  async #run(): Promise<Credential> {
    const { command, args, apiVersion } = this.#config;
    const info: Record<string, unknown> = {
      kind: 'ExecCredential',
      apiVersion,
      spec: {
        interactive: false,
        ...(this.#config.provideClusterInfo ? { cluster: { server: this.#server } } : {}),
      },
    };
    const env = {
      ...process.env,
      ...this.#config.env,
      KUBERNETES_EXEC_INFO: JSON.stringify(info),
    };
    const { stdout, stderr } = await runBounded(command, args, env, this.#config.installHint);
    return this.#accept(parseExecCredential(stdout, apiVersion, command, stderr));
  }

  #accept(parsed: { credential: Credential; expiresAt: number }): Credential {
    this.#held = parsed;
    return parsed.credential;
  }
}

function runBounded(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  installHint: string | undefined,
): Promise<{ stdout: string; stderr: string }> {
  const name = `exec plugin ${command}`;
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: EXEC_TIMEOUT_MS,
      killSignal: 'SIGKILL',
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    let errBytes = 0;
    let failure: string | undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      outBytes += chunk.length;
      if (outBytes > MAX_EXEC_OUTPUT_BYTES) {
        failure ??= `wrote more than ${MAX_EXEC_OUTPUT_BYTES} bytes`;
        child.kill('SIGKILL');
      } else out.push(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      errBytes += chunk.length;
      if (errBytes <= 4096) err.push(chunk);
    });
    child.once('error', (error: NodeJS.ErrnoException) => {
      failure ??=
        error.code === 'ENOENT'
          ? `not found${installHint ? ` (${installHint.trim().split('\n')[0] ?? ''})` : ''}`
          : error.message;
    });
    child.once('close', (code, signal) => {
      const stderr = Buffer.concat(err).toString('utf8').trim();
      const firstLine = stderr.split('\n')[0] ?? '';
      if (failure === undefined && signal !== null) {
        failure = signal === 'SIGKILL' ? `no answer within ${EXEC_TIMEOUT_MS} ms` : signal;
      }
      if (failure === undefined && code !== 0) {
        failure = `exit ${code}${firstLine ? `: ${firstLine}` : ''}`;
      }
      if (failure !== undefined) reject(new CredentialError(`${name}: ${failure}`));
      else resolvePromise({ stdout: Buffer.concat(out).toString('utf8'), stderr });
    });
  });
}

/** An ExecCredential's status, checked as client-go checks it. */
export function parseExecCredential(
  stdout: string,
  apiVersion: string,
  command: string,
  stderr = '',
): { credential: Credential; expiresAt: number } {
  const fail = (reason: string): CredentialError =>
    new CredentialError(
      `exec plugin ${command}: ${reason}${stderr ? ` (stderr: ${stderr.split('\n')[0] ?? ''})` : ''}`,
    );
  let parsed: unknown;
  try {
    parsed = JSON.parse(stdout);
  } catch {
    throw fail('its output is not JSON');
  }
  const object = parsed as { kind?: unknown; apiVersion?: unknown; status?: unknown } | null;
  if (object?.kind !== 'ExecCredential') throw fail('its output is not an ExecCredential');
  if (object.apiVersion !== apiVersion) {
    throw fail(`it answered ${String(object.apiVersion)}, asked for ${apiVersion}`);
  }
  const status = object.status as Record<string, unknown> | null | undefined;
  if (typeof status !== 'object' || status === null) throw fail('its ExecCredential has no status');
  const credential: Credential = {};
  if (typeof status.token === 'string' && status.token !== '') credential.token = status.token;
  const cert = status.clientCertificateData;
  const key = status.clientKeyData;
  if (typeof cert === 'string' && cert !== '' && typeof key === 'string' && key !== '') {
    credential.clientCertificate = cert;
    credential.clientKey = key;
  } else if (cert !== undefined || key !== undefined) {
    throw fail('its ExecCredential has a client certificate without a key, or a key without one');
  }
  if (credential.token === undefined && credential.clientCertificate === undefined) {
    throw fail('its ExecCredential has neither a token nor a client certificate');
  }
  let expiresAt = Number.POSITIVE_INFINITY; // none: kept until refused (client-go)
  if (status.expirationTimestamp !== undefined) {
    const at = status.expirationTimestamp;
    expiresAt = typeof at === 'string' ? Date.parse(at) : Number.NaN;
    if (Number.isNaN(expiresAt)) throw fail('its expirationTimestamp is not a time');
  }
  return { credential, expiresAt };
}

function stringField(value: unknown, what: string): string {
  if (typeof value !== 'string' || value === '') {
    throw invalidArgument(`${what} must be a non-empty string`);
  }
  return value;
}

/** A relative path in a kubeconfig is relative to that file's folder (client-go). */
function fromFolder(path: string, folder: string | undefined): string {
  return folder === undefined || isAbsolute(path) ? path : join(folder, path);
}

function execConfig(raw: unknown, user: string, folder: string | undefined): ExecConfig {
  if (typeof raw !== 'object' || raw === null) {
    throw invalidArgument(`user ${user}: exec must be a mapping`);
  }
  const exec = raw as Record<string, unknown>;
  const command = stringField(exec.command, `user ${user}: exec.command`);
  const apiVersion = EXEC_API_VERSIONS.find((v) => v === exec.apiVersion);
  if (apiVersion === undefined) {
    throw invalidArgument(
      `user ${user}: exec.apiVersion ${JSON.stringify(exec.apiVersion)} is not one of ${EXEC_API_VERSIONS.join(', ')}`,
    );
  }
  if (exec.interactiveMode === 'Always') {
    throw invalidArgument(
      `user ${user}: exec plugin ${command} needs a terminal (interactiveMode Always); a node agent has none`,
    );
  }
  const args = exec.args ?? [];
  if (!Array.isArray(args) || !args.every((a) => typeof a === 'string')) {
    throw invalidArgument(`user ${user}: exec.args must be a list of strings`);
  }
  const env: Record<string, string> = {};
  for (const entry of (exec.env ?? []) as unknown[]) {
    const pair = entry as { name?: unknown; value?: unknown } | null;
    if (typeof pair?.name !== 'string' || typeof pair.value !== 'string') {
      throw invalidArgument(`user ${user}: exec.env entries need a name and a value`);
    }
    env[pair.name] = pair.value;
  }
  return {
    // client-go: a command with a path separator is relative to the kubeconfig's folder.
    command: command.includes('/') ? fromFolder(command, folder) : command,
    args,
    env,
    apiVersion,
    installHint: typeof exec.installHint === 'string' ? exec.installHint : undefined,
    provideClusterInfo: exec.provideClusterInfo === true,
  };
}

/** The auth-providers client-go removed in 1.26, and what replaced them. */
const REMOVED_AUTH_PROVIDERS: Record<string, string> = {
  gcp: 'gke-gcloud-auth-plugin',
  azure: 'kubelogin',
};

/**
 * The credential source of a kubeconfig user, as client-go picks it: a token
 * file, else a token, else an exec plugin (unless the user has a client
 * certificate), else none (client certificates and
 * the rest are TLS, left to client-node). `folder` is the kubeconfig file's, for
 * relative paths. Throws EINVAL, naming the user, for what cannot work.
 */
export function credentialSource(
  user: string,
  raw: RawUser,
  folder: string | undefined,
  server: string,
  hasClientCertificate: boolean,
): CredentialSource {
  const provider = raw['auth-provider'] as { name?: unknown } | undefined;
  const providerName = typeof provider?.name === 'string' ? provider.name : undefined;
  const replacement = providerName === undefined ? undefined : REMOVED_AUTH_PROVIDERS[providerName];
  if (replacement !== undefined) {
    throw invalidArgument(
      `user ${user}: auth-provider ${providerName} was removed from Kubernetes clients in 1.26; use its exec plugin (${replacement})`,
    );
  }
  const file = raw.tokenFile ?? raw['token-file'];
  if (file !== undefined && file !== '') {
    return new TokenFile(fromFolder(stringField(file, `user ${user}: tokenFile`), folder));
  }
  if (raw.token !== undefined && raw.token !== '') {
    return new StaticToken(stringField(raw.token, `user ${user}: token`));
  }
  // client-go runs no exec plugin for a user that has a client certificate.
  if (raw.exec !== undefined && raw.exec !== null && !hasClientCertificate) {
    return new ExecPlugin(execConfig(raw.exec, user, folder), server);
  }
  return NONE;
}

/** The folder of a kubeconfig file, for its relative paths. */
export function folderOf(file: string): string {
  return dirname(resolve(file));
}
