/**
 * flannel's VXLAN backend annotations on a Node, read strictly.
 *
 * flanneld (kube subnet manager) publishes its VTEP on its own Node object:
 *
 *   flannel.alpha.coreos.com/backend-type:    "vxlan"
 *   flannel.alpha.coreos.com/backend-data:    '{"VNI":1,"VtepMAC":"5e:89:db:49:c6:a4"}'  (flannel.1)
 *   flannel.alpha.coreos.com/backend-v6-data: '{"VNI":1,"VtepMAC":"..."}'                (flannel-v6.1)
 *
 * and every other node's flanneld programs its ARP and FDB entries from it.
 * A value is usable only when it is a JSON object with an integer `VNI`
 * (0..2^24-1) naming a valid device and a `VtepMAC` that parseMac accepts;
 * anything else is reported as invalid and never turned into a MAC.
 */
import { isSystemError } from '../core/errors';
import { parseMac, validateInterfaceName } from '../core/validate';

export const DEFAULT_ANNOTATION_PREFIX = 'flannel.alpha.coreos.com';

export type AddressFamily = 'ipv4' | 'ipv6';

export const ADDRESS_FAMILIES: readonly AddressFamily[] = ['ipv4', 'ipv6'];

const VNI_MAX = 0xffffff;

/** The annotation that carries the VTEP of `family`. */
export function backendDataKey(family: AddressFamily, prefix = DEFAULT_ANNOTATION_PREFIX): string {
  return `${prefix}/${family === 'ipv4' ? 'backend-data' : 'backend-v6-data'}`;
}

export function backendTypeKey(prefix = DEFAULT_ANNOTATION_PREFIX): string {
  return `${prefix}/backend-type`;
}

/** flanneld's device name for a VNI: flannel.<VNI>, flannel-v6.<VNI>. */
export function vtepDeviceName(family: AddressFamily, vni: number): string {
  return `${family === 'ipv4' ? 'flannel' : 'flannel-v6'}.${vni}`;
}

export type BackendDataReading =
  | { state: 'absent'; key: string }
  | { state: 'invalid'; key: string; reason: string }
  | {
      state: 'valid';
      key: string;
      family: AddressFamily;
      device: string;
      vni: number;
      mac: string;
      /** The whole decoded value, other fields included, in its original key order. */
      data: Record<string, unknown>;
    };

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Reads one family's backend data from a Node's annotations. A backend type
 * other than vxlan, a missing value or JSON `null` (flannel's "no data")
 * read as absent.
 */
export function readBackendData(
  annotations: Readonly<Record<string, unknown>> | undefined,
  family: AddressFamily,
  prefix = DEFAULT_ANNOTATION_PREFIX,
): BackendDataReading {
  const key = backendDataKey(family, prefix);
  const type = annotations?.[backendTypeKey(prefix)];
  const raw = annotations?.[key];
  if (raw === undefined) return { state: 'absent', key };
  if (type !== undefined && type !== 'vxlan') return { state: 'absent', key };
  const invalid = (reason: string): BackendDataReading => ({ state: 'invalid', key, reason });
  if (typeof raw !== 'string') return invalid('the annotation value is not a string');
  let data: unknown;
  try {
    data = JSON.parse(raw);
  } catch {
    return invalid(`${JSON.stringify(truncate(raw))} is not JSON`);
  }
  if (data === null) return { state: 'absent', key };
  if (!isPlainObject(data)) return invalid(`${JSON.stringify(truncate(raw))} is not a JSON object`);
  const vni = data.VNI;
  if (typeof vni !== 'number' || !Number.isInteger(vni) || vni < 0 || vni > VNI_MAX) {
    return invalid(
      `VNI ${vni === undefined ? 'missing' : JSON.stringify(vni)} is not an integer 0..${VNI_MAX}`,
    );
  }
  let device: string;
  let mac: string;
  try {
    device = validateInterfaceName(vtepDeviceName(family, vni), 'device name');
    mac = parseMac(data.VtepMAC, 'VtepMAC');
  } catch (error) {
    if (!isSystemError(error)) throw error;
    return invalid(error.message.replace(/^EINVAL: /, ''));
  }
  return { state: 'valid', key, family, device, vni, mac, data };
}

/** The annotation value publishing `mac` instead, every other field kept as it was. */
export function withVtepMac(data: Readonly<Record<string, unknown>>, mac: string): string {
  const canonical = parseMac(mac, 'VtepMAC');
  return JSON.stringify({ ...data, VtepMAC: canonical });
}

function truncate(text: string, max = 80): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`;
}
