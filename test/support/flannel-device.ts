/** flannel.1 as flanneld creates it, as `ip -batch` lines for a throw-away namespace. */

/** The underlay: a veth pair, 192.0.2.1 on veth0, which flannel.1 sends through. */
export const UNDERLAY_LINES: readonly string[] = [
  'link add veth0 type veth peer name veth1',
  'address add 192.0.2.1/24 dev veth0',
  'link set veth0 up',
  'link set veth1 up',
];

/** flannel.1 at `mac` (the kernel's random one for null), up, with its address. */
export function flannelDeviceLines(mac: string | null): string[] {
  return [
    `link add flannel.1${mac === null ? '' : ` address ${mac}`} type vxlan id 1 local 192.0.2.1 dev veth0 dstport 8472 nolearning`,
    'address add 198.18.0.0/32 dev flannel.1',
    'link set flannel.1 up',
  ];
}
