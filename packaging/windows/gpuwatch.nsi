; gpuwatch per-user installer for Windows (no administrator rights needed).
;
; Build on Windows after PyInstaller made dist\gpuwatch (see packaging/README.md):
;   makensis /DVERSION=0.1.0 /DDIST=..\..\dist\gpuwatch packaging\windows\gpuwatch.nsi
; Installs to %LOCALAPPDATA%\Programs\gpuwatch, adds a Start-menu shortcut and an entry in
; "Installed apps" (HKCU). Silent: gpuwatch-setup.exe /S [/D=C:\path]. The uninstaller
; removes the program and its shortcut; settings (%LOCALAPPDATA%\gpuwatch) and recordings
; (Documents\gpuwatch) are the user's and stay.

Unicode true
!ifndef VERSION
  !define VERSION "0.1.0"
!endif
!ifndef DIST
  !define DIST "..\..\dist\gpuwatch"
!endif
!ifndef OUTFILE
  !define OUTFILE "gpuwatch-${VERSION}-setup.exe"
!endif
!define APP "gpuwatch"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\${APP}"

Name "${APP} ${VERSION}"
OutFile "${OUTFILE}"
RequestExecutionLevel user
InstallDir "$LOCALAPPDATA\Programs\${APP}"
InstallDirRegKey HKCU "Software\${APP}" "InstallDir"
SetCompressor /SOLID lzma
ManifestDPIAware true

!include "MUI2.nsh"
!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\gpuwatch.exe"
!define MUI_FINISHPAGE_RUN_TEXT "Start gpuwatch"
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Section "gpuwatch" SecMain
  SectionIn RO
  SetOutPath "$INSTDIR"
  ; A previous version's files must not linger beside the new ones.
  RMDir /r "$INSTDIR\_internal"
  File /r "${DIST}\*.*"
  WriteUninstaller "$INSTDIR\uninstall.exe"
  CreateShortCut "$SMPROGRAMS\gpuwatch.lnk" "$INSTDIR\gpuwatch.exe" "" "$INSTDIR\gpuwatch.exe" 0
  WriteRegStr HKCU "Software\${APP}" "InstallDir" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "gpuwatch"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "gpuwatch developers"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\gpuwatch.exe"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINSTALL_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

Section "Uninstall"
  Delete "$SMPROGRAMS\gpuwatch.lnk"
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\gpuwatch.exe"
  Delete "$INSTDIR\gpuwatch-cli.exe"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"
  DeleteRegKey HKCU "Software\${APP}"
SectionEnd
