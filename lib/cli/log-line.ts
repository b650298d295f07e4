/** The log line the services beside the guard write through (the CLI's Output.line). */
export type LogLevel = 'info' | 'warn' | 'error';

/** Writes one log line: an event name, its level, its fields (JSON) and a readable text. */
export type LogLine = (event: string, level: LogLevel, fields: object, text: string) => void;
