/**
 * Errors in Node core's shape. Native failures arrive already shaped (code,
 * negative errno, syscall, interface, netns, extack); the library's own are
 * made here by one constructor, argument problems found before any system
 * call with code 'EINVAL'.
 */
import { constants } from 'node:os';

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
  /** A file the error is about (the state file). */
  path?: string;
  /** The option the message names as `option NAME` (a CLI shows its flag instead). */
  option?: string;
}

export type SystemError = Error & SystemErrorFields;

/** True for errors carrying an errno `code` (from the addon or from here). */
export function isSystemError(error: unknown): error is SystemError {
  return (
    error instanceof Error &&
    typeof (error as Partial<SystemError>).code === 'string' &&
    typeof (error as Partial<SystemError>).errno === 'number'
  );
}

export type ErrnoCode = keyof typeof constants.errno;

/**
 * An error as Node core makes them: the message `CODE: message`, `code`, the
 * negative `errno` of that code (os.constants.errno), and the other fields.
 */
export function systemError(
  code: ErrnoCode,
  message: string,
  fields: Omit<SystemErrorFields, 'code' | 'errno'> = {},
  Kind: new (message: string) => Error = Error,
): SystemError {
  const error = new Kind(`${code}: ${message}`) as SystemError;
  error.code = code;
  error.errno = -constants.errno[code];
  Object.assign(error, fields);
  return error;
}

/** An argument rejected before any system call: a RangeError with code EINVAL. */
export function invalidArgument(
  message: string,
  fields: Omit<SystemErrorFields, 'code' | 'errno'> = {},
): SystemError {
  return systemError('EINVAL', message, fields, RangeError);
}

/** An error's message, or what was thrown as text. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
