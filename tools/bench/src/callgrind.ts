/**
 * Reading a callgrind dump (valgrind's instruction counter) of a Node process: its instructions
 * split by what ran them, and by function, with the JIT-compiled JavaScript named from the
 * process's `--perf-basic-prof` map. Used by `bench:instructions` (instructions.ts).
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

/** A dump's instructions by who ran them. */
export interface InstructionSplit {
  total: number;
  /** The program itself: JavaScript (JIT-compiled or interpreted), V8's builtins, Node, libc. */
  mutator: number;
  /** V8's garbage collector (young and old generation, marking, sweeping), on any thread. */
  gc: number;
  /** V8's compilers (parsing, bytecode, Sparkplug, Maglev, TurboFan), on any thread. */
  compiler: number;
}

// By V8's C++ names: what they match is not the program's own work, and comes in bursts (a major
// collection, a recompile) that a short counted window may or may not catch.
const GC =
  /v8::internal::.*(Mark|Sweep|Scaveng|Evacuat|Compactor|RememberedSet|SlotSet|Worklist|GCTracer|Visitor|FreeList)|heap::base::|HeapObject::SizeFromMap|IterateObjectCache|FlushedBytecode|StringTableCleaner/;
const COMPILER = /compiler::|maglev::|turboshaft|Compiler|(?<!Json)Parser|(?<!Json)Scanner|interpreter::|baseline::/;

/** callgrind_annotate's listing of `file`: every function with its own instruction count. */
export const annotate = (file: string): string =>
  execFileSync("callgrind_annotate", ["--threshold=100", file], { encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });

/** Each function of an annotated listing with its own (exclusive) instructions. */
export function functionCounts(annotated: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of annotated.split("\n")) {
    const match = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.+)$/.exec(line);
    if (!match || line.includes("PROGRAM TOTALS")) continue;
    const name = match[2] as string;
    counts.set(name, (counts.get(name) ?? 0) + Number((match[1] as string).replaceAll(",", "")));
  }
  return counts;
}

/** Whose work a function of a listing is: the program's, the collector's or the compilers'. */
export const kindOf = (name: string): "mutator" | "gc" | "compiler" =>
  COMPILER.test(name) ? "compiler" : GC.test(name) ? "gc" : "mutator";

/** The instructions of `counts` (functionCounts) split into the program's, the collector's and the compilers'. */
export function splitByKind(counts: ReadonlyMap<string, number>): InstructionSplit {
  const split: InstructionSplit = { total: 0, mutator: 0, gc: 0, compiler: 0 };
  for (const [name, count] of counts) {
    split.total += count;
    split[kindOf(name)] += count;
  }
  return split;
}

interface CodeRange {
  start: number;
  end: number;
  name: string;
}

/** A `--perf-basic-prof` map (`/tmp/perf-<pid>.map`: start, size, name per line), sorted by start. */
export function readPerfMap(file: string): CodeRange[] {
  const ranges: CodeRange[] = [];
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const [start, size, ...name] = line.split(" ");
    if (!start || !size || name.length === 0) continue;
    const from = Number.parseInt(start, 16);
    ranges.push({ start: from, end: from + Number.parseInt(size, 16), name: name.join(" ") });
  }
  return ranges.sort((a, b) => a.start - b.start);
}

/** The JavaScript function whose code holds `address`, by its name in the map (tier marks dropped). */
function codeAt(ranges: readonly CodeRange[], address: number): string | undefined {
  let low = 0;
  let high = ranges.length - 1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    const range = ranges[middle] as CodeRange;
    if (address < range.start) high = middle - 1;
    else if (address >= range.end) low = middle + 1;
    else return `JS ${range.name.replace(/^(JS|LazyCompile):[*~^+']*/, "")}`;
  }
  return undefined;
}

/**
 * `counts` with each JIT-compiled address (callgrind names it `???:0x…`) replaced by the
 * JavaScript function it is in, its tiers' counts added up; addresses of no known function are
 * kept as "JS (unnamed code)".
 */
export function nameJitCode(counts: ReadonlyMap<string, number>, ranges: readonly CodeRange[]): Map<string, number> {
  const named = new Map<string, number>();
  for (const [name, count] of counts) {
    const address = /^\?\?\?:0x([0-9a-f]+) /.exec(name)?.[1];
    const key = address === undefined ? name : (codeAt(ranges, Number.parseInt(address, 16)) ?? "JS (unnamed code)");
    named.set(key, (named.get(key) ?? 0) + count);
  }
  return named;
}
