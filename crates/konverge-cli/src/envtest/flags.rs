//! Command lines as the programs konverge stands in for read them: clap parses, and what it
//! refuses is said in the words of Go's flag packages (pflag for kube-apiserver, `flag` for
//! etcd), so scripts and people that know those programs' errors recognise them.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Whose words a refused command line is said in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// spf13/pflag, as kube-apiserver (cobra) prints it: `Error: unknown flag: --foo`.
    Pflag,
    /// Go's `flag` package, as etcd prints it: `flag provided but not defined: -foo`.
    GoFlag,
}

/// Parses `args` (without the program name) as `T`; on `--help` prints the help and gives
/// exit code 0, on a refused command line prints why in `dialect`'s words and gives 1.
pub(super) fn parse<T: clap::Parser>(args: Vec<OsString>, dialect: Dialect) -> Result<T, ExitCode> {
    match T::try_parse_from(args) {
        Ok(parsed) => Ok(parsed),
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = error.print();
            Err(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("{}", refusal(&error, dialect));
            Err(ExitCode::from(1))
        }
    }
}

/// What a refused command line gets said: the Go program's wording for unknown flags,
/// missing and invalid values; clap's own text for anything else.
pub(super) fn refusal(error: &clap::Error, dialect: Dialect) -> String {
    let flag = match error.get(ContextKind::InvalidArg) {
        // `--secure-port <SECURE_PORT>`, `--allow-privileged[=<ALLOW_PRIVILEGED>]`.
        Some(ContextValue::String(arg)) => {
            arg.split([' ', '[', '=']).next().unwrap_or("").to_string()
        }
        _ => String::new(),
    };
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => Some(value.clone()),
        _ => None,
    };
    let reason = std::error::Error::source(error)
        .map(|source| source.to_string())
        .unwrap_or_default();
    let single = |flag: &str| format!("-{}", flag.trim_start_matches('-'));
    let message = match (error.kind(), dialect) {
        (ErrorKind::UnknownArgument, Dialect::Pflag) if flag.starts_with("--") => {
            format!("unknown flag: {flag}")
        }
        (ErrorKind::UnknownArgument, Dialect::Pflag) if flag.starts_with('-') => {
            let short = flag.trim_start_matches('-').chars().next().unwrap_or('-');
            format!("unknown shorthand flag: '{short}' in {flag}")
        }
        (ErrorKind::UnknownArgument, Dialect::GoFlag) if flag.starts_with('-') => {
            format!("flag provided but not defined: {}", single(&flag))
        }
        (ErrorKind::InvalidValue | ErrorKind::NoEquals, _)
            if value.as_deref().is_none_or(str::is_empty) =>
        {
            match dialect {
                Dialect::Pflag => format!("flag needs an argument: {flag}"),
                Dialect::GoFlag => format!("flag needs an argument: {}", single(&flag)),
            }
        }
        (ErrorKind::InvalidValue | ErrorKind::ValueValidation, Dialect::Pflag) => format!(
            "invalid argument {:?} for \"{flag}\" flag: {reason}",
            value.unwrap_or_default()
        ),
        (ErrorKind::InvalidValue | ErrorKind::ValueValidation, Dialect::GoFlag) => format!(
            "invalid value {:?} for flag {}: {reason}",
            value.unwrap_or_default(),
            single(&flag)
        ),
        _ => error.kind().as_str().map_or_else(
            || error.to_string().trim().to_string(),
            |kind| format!("{kind}: {}", error.to_string().trim()),
        ),
    };
    match dialect {
        Dialect::Pflag => format!("Error: {message}"),
        Dialect::GoFlag => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    #[command(name = "demo", no_binary_name = true)]
    struct Demo {
        #[arg(long, default_value_t = 6443)]
        secure_port: u16,
        #[arg(long, value_parser = konverge_apimachinery::query::strconv_parse_bool, num_args = 0..=1, require_equals = true,
              default_missing_value = "true", default_value = "false")]
        allow_privileged: bool,
    }

    fn refused(args: &[&str], dialect: Dialect) -> String {
        let error = <Demo as clap::Parser>::try_parse_from(args).expect_err("refused");
        refusal(&error, dialect)
    }

    #[test]
    fn refusals_use_the_go_programs_words() {
        assert_eq!(
            refused(&["--insecure-port=0"], Dialect::Pflag),
            "Error: unknown flag: --insecure-port"
        );
        assert_eq!(
            refused(&["--foo"], Dialect::GoFlag),
            "flag provided but not defined: -foo"
        );
        assert_eq!(
            refused(&["--secure-port"], Dialect::Pflag),
            "Error: flag needs an argument: --secure-port"
        );
        let invalid = refused(&["--secure-port=https"], Dialect::Pflag);
        assert!(
            invalid.starts_with("Error: invalid argument \"https\" for \"--secure-port\" flag: "),
            "{invalid}"
        );
        assert_eq!(
            refused(&["--allow-privileged=maybe"], Dialect::Pflag),
            "Error: invalid argument \"maybe\" for \"--allow-privileged\" flag: \
             strconv.ParseBool: parsing \"maybe\": invalid syntax"
        );
    }

    #[test]
    fn booleans_read_as_go_reads_them() {
        let parse = |args: &[&str]| {
            <Demo as clap::Parser>::try_parse_from(args)
                .expect("parses")
                .allow_privileged
        };
        assert!(!parse(&[]));
        assert!(parse(&["--allow-privileged"]));
        assert!(parse(&["--allow-privileged=true"]));
        assert!(parse(&["--allow-privileged=1"]));
        assert!(!parse(&["--allow-privileged=False"]));
    }
}
