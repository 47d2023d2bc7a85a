/**
 * A flat field/value list (HGETALL from a script, a stream entry's fields) as a record, added to
 * `into` (fields already there are kept unless the list names them too).
 */
export function recordOf(pairs: readonly string[], into: Record<string, string> = {}): Record<string, string> {
  for (let i = 0; i + 1 < pairs.length; i += 2) into[pairs[i] as string] = pairs[i + 1] as string;
  return into;
}
