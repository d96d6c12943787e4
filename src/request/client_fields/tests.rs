use std::net::IpAddr;

use super::*;

fn fields(listed: &[&'static str], source: ForwardHeader, writes: Writes) -> ClientFields {
    let listed = listed.iter().map(|name| HeaderName::from_static(name));
    ClientFields::new(listed.collect(), source, writes)
}

fn leaves_out(fields: &ClientFields, name: &str, peer_trusted: bool) -> bool {
    fields.leaves_out(name.as_bytes(), peer_trusted)
}

#[test]
fn every_listed_name_goes_in_any_case_from_any_peer() {
    let default = ClientFields::default();
    for name in REMOVED_BY_DEFAULT {
        let shouted = name.to_ascii_uppercase();
        for peer_trusted in [false, true] {
            assert!(leaves_out(&default, name, peer_trusted), "{name}");
            assert!(leaves_out(&default, &shouted, peer_trusted), "{shouted}");
        }
    }
    assert!(leaves_out(&default, "tRuE-cLiEnT-iP", false));
    for kept in ["x-forwarded-host", "accept", "x-real-ips", "cookie", "via"] {
        assert!(!leaves_out(&default, kept, false), "{kept}");
    }
}

#[test]
fn the_configured_field_goes_on_from_a_trusted_proxy_only() {
    for (source, name) in [
        (ForwardHeader::Forwarded, "Forwarded"),
        (ForwardHeader::XRealIp, "X-Real-IP"),
    ] {
        // Listed or not, it is the configured field: removed from anyone else.
        for listed in [&["forwarded", "x-real-ip"][..], &[]] {
            let fields = fields(listed, source, Writes::default());
            assert!(leaves_out(&fields, name, false), "{name}");
            assert!(!leaves_out(&fields, name, true), "{name}");
        }
    }
    // X-Forwarded-For configured: a trusted proxy's Forwarded was not read, so it goes.
    let default = ClientFields::default();
    assert!(leaves_out(&default, "forwarded", true));
    assert!(leaves_out(&default, "x-real-ip", true));
}

#[test]
fn a_field_the_gateway_writes_is_never_the_clients() {
    let writes = Writes {
        x_real_ip: true,
        forwarded: true,
    };
    for source in [ForwardHeader::Forwarded, ForwardHeader::XRealIp] {
        let fields = fields(&[], source, writes);
        for name in ["forwarded", "X-REAL-IP"] {
            assert!(leaves_out(&fields, name, true), "{source:?} {name}");
        }
    }
}

#[test]
fn a_custom_list_replaces_the_default() {
    let fields = fields(
        &["x-my-client"],
        ForwardHeader::XForwardedFor,
        Writes::default(),
    );
    assert!(leaves_out(&fields, "X-My-Client", false));
    assert!(!leaves_out(&fields, "true-client-ip", false));
    // The configured field's companions are no longer listed: they pass.
    assert!(!leaves_out(&fields, "x-real-ip", false));
}

#[test]
fn the_written_values_carry_the_address_rfc_7239_quotes_ipv6() {
    let writes = Writes {
        x_real_ip: true,
        forwarded: true,
    };
    let fields = fields(&[], ForwardHeader::XForwardedFor, writes);
    let longest = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    for (client, real_ip, forwarded) in [
        ("192.0.2.1", "192.0.2.1", "for=192.0.2.1"),
        ("2001:db8::7", "2001:db8::7", "for=\"[2001:db8::7]\""),
        // A dual-stack listener's IPv4 peer: one form, the IPv4 address the limiter counted.
        ("::ffff:192.0.2.1", "192.0.2.1", "for=192.0.2.1"),
        (longest, longest, &format!("for=\"[{longest}]\"")),
    ] {
        let client: IpAddr = client.parse().unwrap();
        let mut out = [0; 64];
        assert_eq!(fields.x_real_ip(client, &mut out), Some(real_ip.as_bytes()));
        assert_eq!(
            fields.forwarded(client, &mut out),
            Some(forwarded.as_bytes())
        );
    }
    let silent = ClientFields::default();
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    assert_eq!(silent.x_real_ip(client, &mut [0; 64]), None);
    assert_eq!(silent.forwarded(client, &mut [0; 64]), None);
}
