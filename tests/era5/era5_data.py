"""ERA5-style test data, written by xarray with ERA5's names and layout (latitude north to south,
longitude from 0, one variable on pressure levels), for tests/era5 and bench/era5_grid.py.

era5_dataset(steps, seed, msl_units, rows, cols) returns the xarray Dataset and the sea-level
pressure in Pa; labels are the pixels inside synthetic lows: a learnable target, not a climate
truth.
"""
import os

import numpy as np
import xarray as xr


def era5_dataset(steps, seed, msl_units="Pa", rows=181, cols=360):
    rng = np.random.default_rng(seed)
    lat = np.linspace(90.0, -90.0, rows)
    lon = np.arange(cols) * (360.0 / cols)
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    msl = np.full((steps, rows, cols), 101325.0)
    labels = np.zeros((steps, rows, cols), np.int32)
    for t in range(steps):
        for _ in range(6):
            clat, clon = rng.uniform(-60, 60), rng.uniform(0, 360)
            dlon = np.minimum(np.abs(lo - clon), 360 - np.abs(lo - clon))
            r2 = ((la - clat) ** 2 + dlon ** 2) / 36.0
            msl[t] -= 3000.0 * np.exp(-r2)
            labels[t][r2 < 1.0] = 1
    msl += rng.normal(0, 50.0, msl.shape)
    t2m = 288.0 - 30.0 * np.abs(np.sin(np.radians(la)))[None] + rng.normal(0, 1.0, msl.shape)
    tcwv = 25.0 + 0.004 * (101325.0 - msl) + rng.normal(0, 1.0, msl.shape)
    u = np.stack([rng.normal(5.0, 3.0, msl.shape), 0.002 * (101325.0 - msl) + rng.normal(0, 1.0, msl.shape)], axis=1)
    msl_values = msl / 100.0 if msl_units == "hPa" else msl
    ds = xr.Dataset(
        {
            "msl": (("time", "latitude", "longitude"), msl_values.astype(np.float64 if msl_units == "hPa" else np.float32),
                    {"units": msl_units, "long_name": "Mean sea level pressure"}),
            "t2m": (("time", "latitude", "longitude"), t2m.astype(np.float32),
                    {"units": "K", "long_name": "2 metre temperature"}),
            "tcwv": (("time", "latitude", "longitude"), tcwv.astype(np.float32),
                     {"units": "kg m**-2", "long_name": "Total column vertically-integrated water vapour"}),
            "u": (("time", "pressure_level", "latitude", "longitude"), u.astype(np.float32),
                  {"units": "m s**-1", "long_name": "U component of wind"}),
            "labels": (("time", "latitude", "longitude"), labels),
        },
        coords={
            "time": ("time", np.arange(steps) * 6.0,
                     {"units": "hours since 2020-01-01 00:00:00", "calendar": "gregorian", "standard_name": "time"}),
            "pressure_level": ("pressure_level", np.array([500.0, 850.0]),
                               {"units": "hPa", "standard_name": "air_pressure", "positive": "down"}),
            "latitude": ("latitude", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "longitude": ("longitude", lon, {"units": "degrees_east", "standard_name": "longitude"}),
        },
        attrs={"Conventions": "CF-1.7", "institution": "test"},
    )
    return ds, msl


def write(ds, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ds.to_netcdf(path, format="NETCDF4")


