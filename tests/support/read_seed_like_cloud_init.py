#!/usr/bin/python3
"""Reads a NoCloud seed URL with cloud-init's own reader (cloudinit.util.read_seeded, as
DataSourceNoCloudNet does), from a chosen source address. Prints the three documents as JSON;
exits 1 with the error when the reader fails."""
import json
import sys

import urllib3.util.connection as connection

seed_url, source_address = sys.argv[1], sys.argv[2]
original_create_connection = connection.create_connection


def from_source_address(address, *args, **kwargs):
    kwargs["source_address"] = (source_address, 0)
    return original_create_connection(address, *args, **kwargs)


connection.create_connection = from_source_address

from cloudinit import util  # noqa: E402  (after the patch, so its requests use it)

try:
    meta_data, user_data, vendor_data = util.read_seeded(seed_url, timeout=5, retries=0)
except Exception as error:  # cloud-init raises UrlError for any HTTP failure
    print(f"seed read failed: {error}")
    sys.exit(1)
print(json.dumps({"meta_data": meta_data,
                  "user_data": user_data.decode() if isinstance(user_data, bytes) else user_data,
                  "vendor_data": vendor_data.decode() if isinstance(vendor_data, bytes) else vendor_data}))
