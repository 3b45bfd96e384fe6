//! The I/O tuning audit's findings (docs/tuning.md): one series per finding, which rule
//! fired on what, so an alert can point at `/status` and `nodemedic check`, where the
//! evidence, cost and fix are. The settings themselves are the tuning collector's series.

use nodemedic_sample::TuningVerdict;

use crate::encoder::{Encoder, Kind};

/// `nodemedic_tuning_finding`: one series per current finding, info and warning alike.
pub(crate) fn findings(e: &mut Encoder, verdict: Option<&TuningVerdict>) {
    // Without a verdict (collector off or failed) there is no audit to report, not an audit
    // that found nothing: no family at all.
    let Some(v) = verdict else {
        return;
    };
    e.family(
        "nodemedic_tuning_finding",
        Kind::Gauge,
        "1 for each current finding of the I/O tuning audit, by rule, subject and severity: info for a setting alone, warning for a setting with its symptom on this node (after hysteresis). Evidence, cost and fix are on /status and in `nodemedic check`.",
    );
    for f in &v.findings {
        e.sample(
            &[
                ("rule", f.rule.as_str()),
                ("subject", &f.subject),
                ("severity", f.severity.as_str()),
            ],
            1.0,
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use nodemedic_sample::finding::Severity;
    use nodemedic_sample::verdict::{TuningFinding, TuningRule};

    use super::*;
    use crate::encoder::Format;

    fn render(verdict: Option<&TuningVerdict>) -> String {
        let mut e = Encoder::new(Format::Text);
        findings(&mut e, verdict);
        e.finish()
    }

    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn one_series_per_finding_with_its_severity() {
        let finding = |rule, severity, subject: &str| TuningFinding {
            rule,
            severity,
            subject: subject.into(),
            evidence: "evidence".into(),
            cost: "cost".into(),
            fix: "fix".into(),
        };
        let verdict = TuningVerdict {
            interval_seconds: Some(10.0),
            findings: vec![
                finding(TuningRule::NicChannels, Severity::Warning, "ens1f0"),
                finding(TuningRule::Srso, Severity::Info, "spec_rstack_overflow"),
            ],
        };
        let text = render(Some(&verdict));
        assert_eq!(
            samples(&text),
            [
                "nodemedic_tuning_finding{rule=\"nic_channels\",subject=\"ens1f0\",severity=\"warning\"} 1",
                "nodemedic_tuning_finding{rule=\"srso\",subject=\"spec_rstack_overflow\",severity=\"info\"} 1",
            ],
            "{text}"
        );
        // An audit that found nothing still declares the family: the alert's metric exists.
        let text = render(Some(&TuningVerdict::default()));
        assert!(
            text.starts_with("# HELP nodemedic_tuning_finding "),
            "{text}"
        );
        assert!(samples(&text).is_empty(), "{text}");
    }
}
