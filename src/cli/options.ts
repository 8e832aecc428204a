// Option parsers shared by subcommands: each rejects bad input with a message naming the flag.
import { InvalidArgumentError } from 'commander';

export function parseIntOption(flag: string): (value: string) => number {
  return (value: string) => {
    if (!/^-?\d+$/.test(value.trim())) throw new InvalidArgumentError(`${flag} expects an integer, got "${value}"`);
    return Number.parseInt(value, 10);
  };
}

export function parseFloatOption(flag: string): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`${flag} expects a number, got "${value}"`);
    return n;
  };
}

/** --precision, checked in each command's action (the message is the same everywhere). */
export function checkPrecision(value: string | undefined): void {
  if (value !== 'exact' && value !== 'fast') throw new Error(`--precision must be exact or fast, got "${value}"`);
}
