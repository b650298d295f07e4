/**
 * Whether `watch` runs against a cluster, and how it reaches it:
 *
 * 1. option `kubeconfig` (a file): that file (a node name is then required);
 * 2. `$KUBECONFIG` and a node name (option `node` or `$NODE_NAME`);
 * 3. in a pod: `$KUBERNETES_SERVICE_HOST` set and a service account token
 *    mounted (a node name is then required: NODE_NAME from the downward API);
 *
 * otherwise not (and `node` alone is an error). Errors name the options as `option NAME`
 * (field `option`): the CLI says its flag instead. Without a cluster the guard
 * behaves exactly as it does without Kubernetes.
 */
import { invalidArgument } from '../core/errors';

export const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

export interface ClusterOptions {
  node?: string | undefined;
  kubeconfig?: string | undefined;
}

export interface ClusterSettings {
  nodeName: string;
  /** The kubeconfig file; undefined: $KUBECONFIG or in-cluster. */
  kubeconfig?: string;
  inCluster: boolean;
  /** How it was decided, for the log. */
  via: 'kubeconfig' | 'KUBECONFIG' | 'in-cluster';
}

/** A Kubernetes object name usable as a Node name (an RFC 1123 DNS subdomain). */
export function validateNodeName(name: string): string {
  if (
    name.length === 0 ||
    name.length > 253 ||
    !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(name)
  ) {
    throw invalidArgument(
      `node name ${JSON.stringify(name)} is not a valid Kubernetes name (lower-case RFC 1123 subdomain)`,
    );
  }
  return name;
}

/**
 * Decides, from the flags and the environment, whether to use the cluster.
 * Throws an EINVAL RangeError (a usage error) for contradictory or incomplete settings.
 */
export function detectCluster(
  options: ClusterOptions,
  env: NodeJS.ProcessEnv,
  exists: (path: string) => boolean,
): ClusterSettings | null {
  const fromEnv = env.NODE_NAME?.trim();
  const node = options.node ?? (fromEnv === '' ? undefined : fromEnv);
  const nodeName = node === undefined ? undefined : validateNodeName(node);
  const inPod = Boolean(env.KUBERNETES_SERVICE_HOST) && exists(SERVICE_ACCOUNT_TOKEN);
  if (options.kubeconfig !== undefined) {
    if (nodeName === undefined) {
      throw invalidArgument('option kubeconfig needs the node name: option node or NODE_NAME', {
        option: 'kubeconfig',
      });
    }
    return { nodeName, kubeconfig: options.kubeconfig, inCluster: false, via: 'kubeconfig' };
  }
  if (env.KUBECONFIG && nodeName !== undefined) {
    return { nodeName, inCluster: false, via: 'KUBECONFIG' };
  }
  if (inPod) {
    if (nodeName === undefined) {
      throw invalidArgument(
        'running in a pod (KUBERNETES_SERVICE_HOST and a service account token) without a node name: set NODE_NAME from the downward API (fieldRef spec.nodeName) or option node',
        { option: 'node' },
      );
    }
    return { nodeName, inCluster: true, via: 'in-cluster' };
  }
  if (options.node !== undefined) {
    throw invalidArgument(
      'option node needs a cluster to read it from: option kubeconfig, KUBECONFIG, or run in a pod',
      { option: 'node' },
    );
  }
  return null;
}
