// The command line of every operator command (`npm run tokens`, `audit-log`, `dead-letters`,
// `migrate`, `move-to-cluster`, `backup`), read the same way: strictly, with -h/--help, so that a
// command never acts on a help request or on an argument it does not know.
import { type ParseArgsConfig, parseArgs } from "node:util";

type Options = NonNullable<ParseArgsConfig["options"]>;

/** A bad command line: one sentence, printed with the usage on stderr (exit status 2). */
export class UsageError extends Error {}

/** What a command's parser returns for -h/--help (or its `help` command). */
export const HELP = "help";

const helpOption = { help: { type: "boolean", short: "h" } } as const;

/** What parseCommandLine returns: parseArgs's values (with `help`) and positionals. */
type CommandLine<O extends Options> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O & typeof helpOption; strict: true; allowPositionals: boolean }>
>;

/** parseArgs's error as one sentence naming the argument ("unknown option --bogus"). */
function sentence(error: unknown): string {
  const { code, message } = error as { code?: unknown; message?: unknown };
  const text = String(message ?? error);
  const quoted = /'([^']*)'/.exec(text)?.[1] ?? "";
  const option = /--?[\w-]+/.exec(quoted)?.[0] ?? quoted;
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") return `unknown option ${option}`;
  if (code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL") return `unexpected argument "${quoted}"`;
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
    return text.includes("does not take") ? `${option} takes no value` : `${option} needs a value`;
  }
  return text.split("\n")[0] ?? text;
}

/**
 * Parses `args` strictly (node:util parseArgs) with `options` and -h/--help (`values.help`). An
 * unknown option, an option without its value, or a positional argument when `positionals` is
 * false throws a UsageError.
 */
export function parseCommandLine<const O extends Options>(
  args: readonly string[],
  options: O,
  { positionals = false }: { positionals?: boolean } = {},
): CommandLine<O> {
  try {
    return parseArgs({
      args: [...args],
      options: { ...options, ...helpOption },
      strict: true,
      allowPositionals: positionals,
    });
  } catch (error) {
    throw new UsageError(sentence(error));
  }
}

/**
 * Runs an operator command: `parse` reads its arguments and returns HELP for a help request (the
 * usage on stdout, exit status 0); `run` does the work and returns the exit status. A UsageError
 * from either ends the command with `error: <sentence>` and the usage on stderr, exit status 2.
 */
export async function runCommandLine<T>(
  argv: readonly string[],
  usage: string,
  parse: (argv: readonly string[]) => T | typeof HELP,
  run: (parsed: T) => Promise<number>,
): Promise<number> {
  try {
    const parsed = parse(argv);
    if (parsed === HELP) {
      process.stdout.write(usage);
      return 0;
    }
    return await run(parsed);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`error: ${error.message}\n\n${usage}`);
    return 2;
  }
}
