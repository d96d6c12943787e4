//! Duration strings of the config contract: an integer followed by one unit
//! (`ms`, `s`, `m`, `h`, `d`), e.g. `"250ms"`, `"10s"`, `"1d"`.

use std::time::Duration;

use super::problems::echo;

/// Parses `"250ms"`, `"10s"`, `"1m"`, `"1h"` or `"1d"`; the error says what was expected.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let expected = || {
        format!(
            "expected a duration like \"250ms\", \"10s\", \"1m\", \"1h\" or \"1d\", got {}",
            echo(text)
        )
    };
    let amount: u64 = number.parse().map_err(|_| expected())?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(expected()),
    };
    amount
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration {} is too large", echo(text)))
}

/// Parses a rate such as `"200/s"`, `"100/m"` or `"5000/h"` into (count, period).
pub(crate) fn parse_rate(text: &str) -> Result<(u64, Duration), String> {
    let expected = || {
        format!(
            "expected a rate like \"200/s\", \"100/m\" or \"5000/h\", got {}",
            echo(text)
        )
    };
    let (count, unit) = text.trim().split_once('/').ok_or_else(expected)?;
    let count: u64 = count.trim().parse().map_err(|_| expected())?;
    let per = match unit.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        "d" => Duration::from_secs(86400),
        _ => return Err(expected()),
    };
    if count == 0 {
        return Err(format!("expected a rate above zero, got {}", echo(text)));
    }
    Ok((count, per))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
    }

    #[test]
    fn parses_rates() {
        assert_eq!(parse_rate("200/s"), Ok((200, Duration::from_secs(1))));
        assert_eq!(parse_rate("100/m"), Ok((100, Duration::from_secs(60))));
        assert_eq!(parse_rate("5000/h"), Ok((5000, Duration::from_secs(3600))));
        for bad in ["200", "0/s", "x/s", "10/y", "/s", "-1/s"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for bad in [
            "",
            "10",
            "s",
            "1.5s",
            "-1s",
            "10 sec",
            "10S",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse_duration("10x").unwrap_err().contains("\"250ms\""));
    }
}
