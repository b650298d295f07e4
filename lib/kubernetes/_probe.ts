import type { V1Node } from '@kubernetes/client-node' with { 'resolution-mode': 'import' };
type K8s = typeof import('@kubernetes/client-node', { with: { 'resolution-mode': 'import' } });
export async function probe(): Promise<V1Node | undefined> {
  const k8s: K8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  void kc;
  return undefined;
}
