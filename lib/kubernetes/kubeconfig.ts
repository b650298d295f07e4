/**
 * A kubeconfig read within bounds (a file, KUBECONFIG's list, or the pod's service account), and
 * the credentials it names handed to the guard's own credential source.
 */
import { invalidArgument, isSystemError, type SystemError } from '../core/errors';
import { readRegularFile } from '../core/files';
import { credentialSource, folderOf, type CredentialSource, type RawUser } from './credentials';
import type { ClientNodeModule, KubeConfigLike, KubeUserLike } from './client-node';

/** A kubeconfig is a few KiB; an embedded exec plugin config or many contexts stay far below. */
export const MAX_KUBECONFIG_BYTES = 1024 * 1024;

/**
 * Loads a kubeconfig file, read once within bounds, its relative paths taken from its
 * folder. Its errors are about the option: `option kubeconfig FILE: REASON`, with the
 * field `option` (a CLI says its flag).
 */
export function loadKubeconfig(config: KubeConfigLike, file: string): string {
  const fields = { option: 'kubeconfig', path: file };
  const fail = (reason: string, cause?: unknown): SystemError =>
    Object.assign(invalidArgument(`option kubeconfig ${file}: ${reason}`, fields), { cause });
  const text = readRegularFile(file, MAX_KUBECONFIG_BYTES, 'option kubeconfig', { fields });
  if (text.trim() === '') throw fail('the file is empty');
  try {
    config.loadFromString(text);
  } catch (error) {
    throw fail(
      `not a kubeconfig: ${error instanceof Error ? error.message : String(error)}`,
      error,
    );
  }
  if (!config.getCurrentCluster()) throw fail('the kubeconfig has no current cluster');
  config.makePathsAbsolute(folderOf(file));
  return text;
}

/**
 * Runs client-node's loading of a configuration that did not come from option `kubeconfig`;
 * its errors say where the configuration came from (`KUBECONFIG: …`, `in-cluster: …`).
 */
export function loadFrom(
  origin: 'KUBECONFIG' | 'in-cluster',
  config: KubeConfigLike,
  load: () => void,
): void {
  try {
    load();
  } catch (error) {
    if (isSystemError(error)) throw error; // ours, and naming its source already
    throw Object.assign(
      invalidArgument(`${origin}: ${error instanceof Error ? error.message : String(error)}`),
      { cause: error },
    );
  }
  if (!config.getCurrentCluster()) {
    throw invalidArgument(`${origin}: the kubeconfig has no current cluster`);
  }
}

export interface KubeconfigText {
  text: string;
  folder: string;
}

/** The current user as the first kubeconfig file naming it spells it (client-go's merge). */
function rawUser(
  k8s: ClientNodeModule,
  texts: KubeconfigText[],
  name: string,
): { raw: RawUser; folder: string } | undefined {
  for (const { text, folder } of texts) {
    const [document] = k8s.loadAllYaml(text) as [{ users?: unknown } | null | undefined];
    const users: unknown[] = Array.isArray(document?.users) ? document.users : [];
    const entry = users.find((u) => (u as { name?: unknown } | null)?.name === name) as
      { user?: unknown } | undefined;
    if (entry !== undefined) {
      const raw = typeof entry.user === 'object' && entry.user !== null ? entry.user : {};
      return { raw, folder };
    }
  }
  return undefined;
}

/**
 * The current user's credential source; what it takes over is cleared from
 * client-node's user, so that one side only sends a credential (client-node
 * keeps no `tokenFile`, and would run an exec plugin its own way).
 */
export function takeCredentials(
  k8s: ClientNodeModule,
  config: KubeConfigLike,
  texts: KubeconfigText[] | null,
): CredentialSource {
  const user = config.getCurrentUser();
  const server = config.getCurrentCluster()?.server ?? '';
  if (!user) return credentialSource('', {}, undefined, server, false);
  const found =
    texts === null
      ? { raw: inClusterUser(user), folder: undefined }
      : (rawUser(k8s, texts, user.name) ?? { raw: {}, folder: undefined });
  const hasCertificate = Boolean(user.certData ?? user.certFile);
  const source = credentialSource(user.name, found.raw, found.folder, server, hasCertificate);
  if (source.kind !== 'none') {
    user.token = null;
    user.exec = null;
    if (user.authProvider?.config?.tokenFile !== undefined || user.authProvider?.name === 'exec') {
      user.authProvider = null;
    }
  }
  return source;
}

/** client-node's in-cluster user: an auth-provider carrying the service account's token file. */
function inClusterUser(user: KubeUserLike): RawUser {
  const tokenFile = user.authProvider?.config?.tokenFile;
  return typeof tokenFile === 'string' ? { tokenFile } : {};
}
