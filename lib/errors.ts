/**
 * Errors in Node core's shape. Native failures arrive already shaped (code,
 * negative errno, syscall, interface, netns, extack); argument problems found
 * before any system call are made here, with code 'EINVAL'.
 */

export interface SystemErrorFields {
  /** errno name: 'EPERM', 'ENODEV', 'EINVAL', ... */
  code: string;
  /** Negative errno, as in Node core. */
  errno: number;
  /** The failed call: 'setlink', 'setns', 'ioctl(ETHTOOL_SFEATURES)', ... */
  syscall?: string;
  interface?: string;
  ifindex?: number;
  /** The network namespace the call was made in, as the caller named it. */
  netns?: string;
  /** The kernel's extended-ACK message. */
  extack?: string;
  detail?: string;
  /** For EPERM: the capability that is missing. */
  capability?: string;
}

export type SystemError = Error & SystemErrorFields;

const EINVAL = 22;

/** True for errors carrying an errno `code` (from the addon or from here). */
export function isSystemError(error: unknown): error is SystemError {
  return (
    error instanceof Error &&
    typeof (error as Partial<SystemError>).code === 'string' &&
    typeof (error as Partial<SystemError>).errno === 'number'
  );
}

/** An argument rejected before any system call. */
export function invalidArgument(
  message: string,
  fields: Omit<SystemErrorFields, 'code' | 'errno'> = {},
): SystemError {
  const error = new RangeError(`EINVAL: ${message}`) as RangeError & SystemErrorFields;
  error.code = 'EINVAL';
  error.errno = -EINVAL;
  Object.assign(error, fields);
  return error;
}
