"""Cloud metadata and cloud-internal service endpoints: addresses and names the egress proxy never dials.

These are checked *first*, before any address class or policy (:func:`sandbox._addresses.address_verdict`), so
no ``private_networks`` range, IP-literal entry or wildcard opens them: a worker that could reach one could read
the host's cloud credentials (AWS IMDS role keys, GCP service-account tokens, Azure managed identities) or
talk to the cloud's host agent. An IPv6 form that carries one of the IPv4 addresses (IPv4-mapped, -compatible,
NAT64, 6to4, Teredo: :func:`sandbox._addresses.embedded_ipv4`) is refused the same way.

Each entry names its source (the provider's documentation of the endpoint). Several are link-local or reserved
and would be refused by their class anyway; they are listed so that the refusal says what they are, and so
that the list stays complete if a class rule ever changes. The IPv6 ones (``fd00:ec2::/..``, ``fd20:ce::254``,
``fd00:c1::..``) and Alibaba's ``100.100.100.200`` are in *private* ranges (``fc00::/7``, ``100.64.0.0/10``) that
a policy may open: that is why this list exists.

What it does not do: know endpoints a provider adds later, or a metadata service a site runs on an ordinary
address (an operator who has one must not open its range). Names are matched exactly (normalised: lower case,
no trailing dot); they are refused even when an ``AllowedHosts`` entry names them, before any lookup.
"""

from __future__ import annotations

import ipaddress

__all__ = ["METADATA_ADDRESSES", "METADATA_NAMES", "metadata_address", "metadata_name"]

#: address -> what it is and where it is documented
METADATA_ADDRESSES: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, str] = {
    ipaddress.ip_address(text): what
    for text, what in (
        (
            "169.254.169.254",
            "instance metadata of AWS (IMDS), GCP, Azure (IMDS), Oracle Cloud (IMDS), "
            "DigitalOcean, OpenStack (Nova), IBM Cloud, Hetzner, Linode and others (each "
            "provider's instance metadata docs)",
        ),
        ("fd00:ec2::254", "AWS instance metadata over IPv6 (AWS EC2 docs: 'Access instance metadata', Nitro)"),
        ("169.254.170.2", "AWS ECS task metadata and credentials endpoint (AWS ECS docs: task IAM roles)"),
        ("169.254.170.23", "AWS EKS Pod Identity agent, credentials (AWS EKS docs: EKS Pod Identity)"),
        ("fd00:ec2::23", "AWS EKS Pod Identity agent over IPv6 (AWS EKS docs: EKS Pod Identity)"),
        ("169.254.169.253", "AWS Route 53 VPC resolver (AWS VPC docs: Amazon DNS server)"),
        ("fd00:ec2::253", "AWS Route 53 VPC resolver over IPv6 (AWS VPC docs: Amazon DNS server)"),
        ("169.254.169.123", "AWS Time Sync Service (AWS EC2 docs: 'Set the time for your instance')"),
        ("fd00:ec2::123", "AWS Time Sync Service over IPv6 (AWS EC2 docs: 'Set the time for your instance')"),
        ("fd20:ce::254", "GCP metadata server over IPv6 (Google Compute Engine docs: 'About VM metadata')"),
        (
            "168.63.129.16",
            "Azure WireServer: VM agent, extensions, DNS, health probes (Azure docs: 'What is "
            "IP address 168.63.129.16?')",
        ),
        ("100.100.100.200", "Alibaba Cloud ECS instance metadata (Alibaba Cloud ECS docs: 'Instance metadata')"),
        ("192.0.0.192", "Oracle Cloud (Classic) instance metadata (Oracle Cloud docs: 'Retrieving instance metadata')"),
        ("fd00:c1::a9fe:a9fe", "Oracle Cloud IMDS over IPv6 (OCI docs: 'Getting instance metadata')"),
        ("fe80::a9fe:a9fe", "OpenStack metadata over IPv6 (OpenStack Neutron spec 'IPv6 support in Metadata service')"),
        (
            "169.254.0.23",
            "Tencent Cloud instance metadata, metadata.tencentyun.com (Tencent Cloud CVM docs: 'Instance metadata')",
        ),
    )
}

#: host names of metadata services, matched exactly after normalisation
METADATA_NAMES: dict[str, str] = {
    "metadata.google.internal": "GCP metadata server (Google Compute Engine docs: 'About VM metadata')",
    "metadata.goog": "GCP metadata server (Google Compute Engine docs: 'About VM metadata')",
    "metadata": "GCP metadata server, short name (Google Compute Engine docs: 'About VM metadata')",
    "instance-data": "AWS instance metadata, legacy name (AWS EC2 docs)",
    "instance-data.ec2.internal": "AWS instance metadata, legacy name (AWS EC2 docs)",
    "metadata.tencentyun.com": "Tencent Cloud instance metadata (Tencent Cloud CVM docs: 'Instance metadata')",
}


def metadata_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """What ``ip`` is when it is a cloud metadata or cloud-internal service address (exactly), else ``None``."""
    return METADATA_ADDRESSES.get(ip)


def metadata_name(name: str) -> str | None:
    """What ``name`` (normalised: lower case, no trailing dot) is when it names a metadata service, else ``None``."""
    return METADATA_NAMES.get(name)
